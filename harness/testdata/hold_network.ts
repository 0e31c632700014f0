// A copy of the suite, in small (harness/hosts_test.ts): says `ready`, waits for SIGUSR1 (so two of it start
// at the same moment), makes a host network of one host and a PostgreSQL server of its own on its bridge,
// prints what it made as one JSON line, and holds both until its stdin closes.
import { HostNetwork } from "../hosts.ts";
import { startPgServer } from "../pg_server.ts";

const go = Promise.withResolvers<void>();
Deno.addSignalListener("SIGUSR1", go.resolve);
console.log("ready");
await go.promise;
Deno.removeSignalListener("SIGUSR1", go.resolve);
const net = await HostNetwork.create({ hosts: 1 });
const pg = await startPgServer({ listen: net.rootAddress, trustCidr: net.subnet });
console.log(
  JSON.stringify({ subnet: net.subnet, bridge: net.bridge, netns: net.hosts[0].netns, pgDir: pg.dir }),
);
// Bounded by stdin: the loop ends when the parent closes it.
for await (const _ of Deno.stdin.readable) {
  // Nothing is read from stdin; its end is the signal.
}
await pg.close();
await net.close();
