import assert from "node:assert/strict";
import { hostsSkipReason, ip, removeStaleHosts } from "./hosts.ts";
import { pgServerSkipReason, removeStalePgServers } from "./pg_server.ts";
import { Proc } from "./procs.ts";

const NAME =
  "two processes making host networks at once get a /24 each, and a start removes a dead one's, never a live one's";
const SKIP = hostsSkipReason() ?? pgServerSkipReason();
if (SKIP) console.log(`skipped (${SKIP}): ${NAME}`);

/** What `testdata/hold_network.ts` made. */
interface Held {
  subnet: string;
  bridge: string;
  netns: string;
  pgDir: string;
}

async function made(proc: Proc): Promise<Held> {
  const line = await proc.waitFor((l) => l.startsWith("{"), "the network and its server", 120_000);
  return JSON.parse(line);
}

async function exists(held: Held): Promise<{ netns: boolean; bridge: boolean; pgDir: boolean }> {
  const names = (await ip("netns", "list")).split("\n").map((l) => l.split(" ")[0]);
  const bridge = await ip("link", "show", held.bridge).then(() => true, () => false);
  const pgDir = await Deno.stat(held.pgDir).then(() => true, () => false);
  return { netns: names.includes(held.netns), bridge, pgDir };
}

// Two copies of the suite on one machine each make a network: without the lock around picking a /24, both
// saw the same one free and both took it; and each start's clean-up must leave the other's network alone.
Deno.test({
  name: NAME,
  ignore: SKIP !== undefined,
  async fn() {
    const procs = [0, 1].map(() => new Proc("harness/testdata/hold_network.ts", {}, { stdin: "piped" }));
    try {
      // Both loaded and waiting, then told to go together: their looks for a free /24 overlap.
      await Promise.all(procs.map((p) => p.waitFor((l) => l === "ready", "the child to load", 60_000)));
      for (const p of procs) p.kill("SIGUSR1");
      const [a, b] = await Promise.all(procs.map(made));
      assert.notEqual(a.subnet, b.subnet, "both took the same /24");
      assert.notEqual(a.bridge, b.bridge);

      // Both owners alive: a start removes neither's network nor server.
      const removed = [...await removeStaleHosts(), ...await removeStalePgServers()];
      for (const held of [a, b]) {
        assert.ok(
          !removed.some((r) => r.includes(held.bridge) || r.includes(held.netns)),
          removed.join("\n"),
        );
        assert.ok(!removed.includes(held.pgDir), removed.join("\n"));
        assert.deepEqual(await exists(held), { netns: true, bridge: true, pgDir: true });
      }

      // The first is killed, leaving everything behind: the next start removes its network and stops and
      // deletes its server, and leaves the second's.
      procs[0].kill("SIGKILL");
      await procs[0].status;
      await procs[0].closeStdin();
      await removeStaleHosts();
      await removeStalePgServers();
      assert.deepEqual(await exists(a), { netns: false, bridge: false, pgDir: false });
      assert.deepEqual(await exists(b), { netns: true, bridge: true, pgDir: true });

      // The second, told to stop, removes what it made itself.
      await procs[1].closeStdin();
      assert.equal(await procs[1].status, 0, procs[1].lines.join("\n"));
      assert.deepEqual(await exists(b), { netns: false, bridge: false, pgDir: false });
    } finally {
      for (const p of procs) await p.close();
      await removeStaleHosts();
      await removeStalePgServers();
    }
  },
});
