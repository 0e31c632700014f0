/**
 * `schedule add|list|pause|resume|remove`: what each prints (through the
 * display rule), and the exit codes of a refusal (2 for what was given
 * wrong, before any database is opened; 1 for a schedule that does not
 * exist). One embedded database for the file (a cold start costs seconds).
 */

import assert from "node:assert/strict";
import demo from "../examples/provision/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { ManualClock } from "../runtime/base/clock.ts";
import { Store } from "../runtime/store/store.ts";
import { main, scheduleCommand } from "./schedule.ts";
import { openTestPglite } from "../tests/_pglite.ts";

Deno.test("schedule add, list, pause, resume and remove print what they did", async () => {
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const client = new Client(store, new ManualClock(Date.UTC(2026, 11, 4, 20, 0, 0))); // a Friday, 15:00 in New York
  const out: string[] = [];
  const print = (line: string) => out.push(line);
  const command = async (
    sub: string,
    name: string,
    opts: Parameters<typeof scheduleCommand>[3] = { lastRuns: 3, print },
  ) => {
    out.length = 0;
    await scheduleCommand(client, sub, name, opts);
    return [...out];
  };
  try {
    const weekdays = {
      name: "weekday-report",
      cron: "0 9 * * MON-FRI",
      zone: "America/New_York",
      input: "Summarise the week\u001b[31m",
    };
    assert.deepEqual(
      await command("add", "weekday-report", { add: { agent: demo, opts: weekdays }, lastRuns: 3, print }),
      [
        'scheduled  name=weekday-report  agent=provision  cron="0 9 * * MON-FRI"  zone=America/New_York  overlap=skip  ' +
        'catch_up=last  next=2026-12-07T14:00:00Z (2026-12-07 09:00)  input="Summarise the week\\u001b[31m"',
      ],
    );
    const tick = { name: "tick", every: "30s", overlap: "allow" as const, catchUp: "all" as const };
    await command("add", "tick", { add: { agent: demo, opts: tick }, lastRuns: 3, print });
    await store.leases.createRun(
      { runId: "tick@20261204T200030Z", agent: "provision", goal: "g" },
      new Date(),
    );
    await store.client.run(
      "update runs set schedule = 'tick', scheduled_at = $1 where run_id = 'tick@20261204T200030Z'",
      [
        new Date(Date.UTC(2026, 11, 4, 20, 0, 30)).toISOString(),
      ],
    );
    assert.deepEqual(await command("list", ""), [
      "SCHEDULE        AGENT      WHEN                                     OVERLAP  CATCH-UP  NEXT                                     SKIPPED",
      "tick            provision  every 30s                                allow    all       2026-12-04T20:00:30Z                     0",
      "weekday-report  provision  cron 0 9 * * MON-FRI (America/New_York)  skip     last      2026-12-07T14:00:00Z (2026-12-07 09:00)  0",
      "tick: tick@20261204T200030Z pending",
      "waiting: no live worker hosts agent provision; its schedules tick once a supervisor or worker does",
    ]);
    assert.deepEqual(await command("pause", "tick"), ["paused  name=tick"]);
    assert.match((await command("list", ""))[1], /^tick .* paused +0$/);
    assert.deepEqual(await command("resume", "tick"), ["resumed  name=tick  next=2026-12-04T20:00:30Z"]);
    assert.deepEqual(await command("remove", "tick"), ["removed  name=tick  (its runs stay)"]);
    assert.equal((await command("list", "")).length, 3);
  } finally {
    await store.client.close();
  }
});

Deno.test("schedule refuses what it is given wrong with exit 2 before opening a database, and a missing schedule with exit 1", async () => {
  const dir = await Deno.makeTempDir({ prefix: "schedule_test_" });
  const cases: [string[], number][] = [
    [["add", "x", "--cron", "0 9 * *"], 2],
    [["add", "x", "--every", "5 weeks"], 2],
    [["add", "x", "--every", "5m", "--zone", "Europe/Berlin"], 2],
    [["add", "x", "--every", "5m", "--overlap", "sometimes"], 2],
    [["add", "x"], 2],
    [["add", "x y", "--every", "5m"], 2],
    [["list", "extra"], 2],
    [["pause"], 2],
    [["frobnicate", "x"], 2],
    [["list", "--cron", "* * * * *"], 2],
    [["remove", "nobody"], 1],
  ];
  const errors: string[] = [];
  const original = console.error;
  console.error = (line: string) => errors.push(line);
  try {
    for (const [args, code] of cases) {
      assert.equal(await main(args, { DATA_DIR: `${dir}/pglite` }, () => {}), code, args.join(" "));
    }
  } finally {
    console.error = original;
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
  assert.match(
    errors[0],
    /SCHEDULE_INVALID: Cannot read the cron expression "0 9 \* \*": it has 4 fields, not 5/,
  );
  assert.match(errors[2], /'zone' goes with 'cron' only/);
  assert.match(errors.at(-1)!, /SCHEDULE_NOT_FOUND: No schedule "nobody"/);
});
