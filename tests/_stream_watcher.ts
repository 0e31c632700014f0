/**
 * A watcher in a process of its own, for tests/streaming_test.ts: follows
 * one run with `client.stream` and prints each event as a JSON line with the
 * wall-clock time it was received (`at`, ms), then exits when the stream ends.
 *
 * usage: deno run -A tests/_stream_watcher.ts DATABASE_URL RUN_ID
 *
 * @module
 */

import { connect } from "../runtime/client/client.ts";

const [databaseUrl, runId] = Deno.args;
const client = await connect({ databaseUrl, poolSize: 2 });
try {
  for await (const event of client.stream(runId, { pollMs: 100 })) {
    console.log(JSON.stringify({ at: Date.now(), event }));
  }
} finally {
  await client.close();
}
