import { connect } from "../../mod.ts"; // outside this repository: "@agent-runtime/agent-runtime"
import notes from "./agent.ts";

const client = await connect({ dataDir: ".data" }); // or { databaseUrl: "postgres://..." }
const run = await client.run(notes, "Remind me to water the plants on Friday.");
console.log(run.status, run.output); // done Called write_note.
await client.close();
