/**
 * What `inspect`, `runs`, `approve`, `deny`, `cancel` and `resolve` print of
 * hostile values: no escape sequence, bidi control or invisible character
 * reaches the terminal (each is shown as its escape), and a value's extra
 * lines are indented behind `| ` so none can pass for a line of the report.
 * In-process on the embedded database, and as real processes on PostgreSQL.
 */

import assert from "node:assert/strict";
import { main } from "../cli/commands.ts";
import { Client, connect } from "../runtime/client/client.ts";
import { pgTest, seedDataDir } from "./_pg.ts";
import { runCliIsolated } from "../harness/procs.ts";
import { RAW_HIDDEN, writeHostileRuns } from "./_display_runs.ts";

/** Who acts: a right-to-left override passes the rule of ids.ts (it is shown as its escape)... */
const BY = "eve\u202e";
/** ...a control character does not: the commands refuse it, in one line, escaped. */
const BY_CONTROL = "eve\u001b]0;t\u0007";

/** The report's own lines: what each line of a hostile value must not be mistaken for. */
function assertShownSafely(what: string, out: string): void {
  const bad = RAW_HIDDEN.exec(out);
  assert.equal(bad, null, `${what}: a raw ${JSON.stringify(bad?.[0])} reached the terminal:\n${out}`);
  for (const line of out.split("\n")) {
    assert.doesNotMatch(line, /^(step 9|\s*output: nothing was deleted|\s*really)$/, `${what}: ${line}`);
  }
}

function assertInspectShowsEverything(one: string, three: string, two: string): void {
  // Shown, as escapes: the input, the refused answer, the arguments, the result, the error, the output.
  assert.match(one, /^ {2}input: goal \\u001b\]0;owned-title\\u0007.*\\u202eevil\\u202c/m);
  assert.match(one, /^ {4}\| second line$/m);
  assert.match(one, /rejected UNKNOWN_TOOL: .*no_such_\\u001b\]0;owned-title/);
  assert.match(one, /decision {2}confirmed {2}lookup \{"q":"\\u001b\]0;owned-title\\u0007\\u001b\]52;c;/);
  assert.match(one, /result=\{"found":"\\u001b\]0;owned-title/);
  assert.match(one, /^ {4}error: quota \\u001b\]0;owned-title.*\\u001b\[8mhidden/m);
  assert.match(
    one,
    /^ {2}output: All fine\.\\u001b\]0;owned-title.*\\u009b31m\\u202eevil\\u202c\\u200b\\u007f\\u2028/m,
  );
  assert.match(one, /^ {4}\| step 9$/m);
  assert.match(one, /^ {4}\| {3}output: nothing was deleted$/m);
  assert.match(one, /owner=w\\u001b\]0;owned-title/);
  // The approval: who denied what, when, and why.
  assert.match(
    three,
    /approval {2}denied {2}transfer \{"to":"ACCT-\\u202e9876\\u202c","cents":100\} .*by=bob\\u001b/,
  );
  assert.match(three, /^ {4}reason: no \\u001b\]0;owned-title/m);
  assert.match(three, /^ {6}\| really$/m);
  assert.match(
    two,
    /approval {2}pending {2}transfer \{"to":"ACCT-\\u202e9876\\u202c","cents":100\} {2}asked=/,
  );
  assert.match(two, /!! waiting for a person: 'deno task approve hostile-2:0'/);
  assert.match(
    two,
    /!! the arguments hold 2 control, bidi or invisible characters \(\\u202e \\u202c\), shown as escapes/,
  );
}

Deno.test("inspect, runs, approve and cancel print hostile values escaped, in-process on the embedded database", async () => {
  const dir = await Deno.makeTempDir({ prefix: "cli_display_" });
  await seedDataDir(dir);
  try {
    const writer = await connect({ dataDir: dir });
    await writeHostileRuns(writer);
    await writer.close();
    const env = { DATA_DIR: dir, DATABASE_URL: "" };
    const run = async (...args: string[]) => {
      const out: string[] = [];
      const code = await main([...args, "--by", BY], env, (l) => out.push(l));
      assert.equal(code, 0, out.join("\n"));
      return out.join("\n");
    };
    const [one, two, three] = [
      await run("inspect", "hostile-1"),
      await run("inspect", "hostile-2"),
      await run("inspect", "hostile-3"),
    ];
    for (
      const [what, out] of [["inspect hostile-1", one], ["inspect hostile-2", two], [
        "inspect hostile-3",
        three,
      ]]
    ) {
      assertShownSafely(what, out);
    }
    assertInspectShowsEverything(one, three, two);
    const list = await run("runs");
    assertShownSafely("runs", list);
    assert.match(list, /^hostile-1 +hostile +done +\d+ +w\\u001b\]0;owned-title/m);
    const approved = await run("approve", "hostile-2:0");
    assertShownSafely("approve", approved);
    assert.match(
      approved,
      /args="\{\\"to\\":\\"ACCT-\\\\u202e9876\\\\u202c\\",\\"cents\\":100\}" {2}by="eve\\u202e"/,
    );
    assert.match(
      await run("inspect", "hostile-2"),
      /approval {2}approved {2}transfer .* by=eve\\u202e {2}at=\d{4}-/,
      "who approved what, and when",
    );
    const cancelled = await run("cancel", "hostile-2");
    assertShownSafely("cancel", cancelled);
    assert.match(cancelled, /owner=w\\u001b\]0;owned-title/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

pgTest(
  "inspect, runs, approve, deny, cancel and resolve print hostile values escaped, as processes on PostgreSQL",
  async (pg) => {
    const client = new Client(pg.store);
    await writeHostileRuns(client);
    const cli = async (...args: string[]) => {
      const { code, out } = await runCliIsolated(args, { DATABASE_URL: pg.url });
      return { code, text: out };
    };
    const ok = async (...args: string[]) => {
      const r = await cli(...args);
      assert.equal(r.code, 0, r.text);
      assertShownSafely(args.join(" "), r.text);
      return r.text;
    };
    assertInspectShowsEverything(
      await ok("inspect", "hostile-1"),
      await ok("inspect", "hostile-3"),
      await ok("inspect", "hostile-2"),
    );
    assert.match(await ok("runs"), /^hostile-1 +hostile +done /m);
    // Who acts with a control character in the name: refused before anything is written, shown escaped.
    const controlBy = await cli("approve", "hostile-2:0", "--by", BY_CONTROL);
    assert.equal(controlBy.code, 2, controlBy.text);
    assertShownSafely("approve --by (refused)", controlBy.text);
    assert.match(controlBy.text, /^ID_INVALID: .*"eve\\u001b\]0;t\\u0007"/m);
    assert.match(await ok("approve", "hostile-2:0", "--by", BY), /by="eve\\u202e"/);
    assert.match(await ok("cancel", "hostile-2", "--by", BY), /owner=w\\u001b\]0;owned-title/);
    // A refusal echoes the key it was given: escaped too, on one line (not a key: exit 2, as a bad flag).
    const refused = await cli("deny", "hostile-3:0\u202e", "--reason", "x");
    assert.equal(refused.code, 2);
    assertShownSafely("deny (refused)", refused.text);
    assert.match(refused.text, /hostile-3:0\\u202e/);
    const unknown = await cli("resolve", `nope\u001b[2K:0`, "--retry", "--by", BY);
    assert.equal(unknown.code, 2);
    assertShownSafely("resolve (refused)", unknown.text);
  },
);
