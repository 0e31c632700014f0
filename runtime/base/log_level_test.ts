import assert from "node:assert/strict";
import { ManualClock } from "./clock.ts";
import { arraySink, discardSink, Logger } from "./log.ts";

Deno.test("Logger drops events below its level before formatting them", () => {
  const lines: string[] = [];
  const log = new Logger({ clock: new ManualClock(0), sink: arraySink(lines), level: "WARN" });
  log.info("decided", { run: "r" });
  log.warn("fenced", { run: "r" });
  assert.deepEqual(lines, ["ts=1970-01-01T00:00:00.000Z level=warn event=fenced run=r"]);
  assert.equal(log.enabled("INFO"), false);
  assert.equal(log.enabled("ERROR"), true);
});

Deno.test("Logger on discardSink formats nothing, not even a field's value", () => {
  const log = new Logger({ clock: new ManualClock(0), sink: discardSink });
  const touchy = {
    toJSON() {
      throw new Error("formatted a line nobody reads");
    },
  };
  log.error("failed", { value: touchy });
  log.raw("!!! CRASH_AT=after_call seq=0 -- kill -9");
  assert.equal(log.enabled("ERROR"), false);
});
