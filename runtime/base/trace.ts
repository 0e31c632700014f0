/**
 * The trace context of the running code as HTTP headers, for a request the
 * runtime sends itself: a leaf, so a planner can carry the trace without
 * importing the run's telemetry.
 *
 * @module
 */

import { context, propagation } from "npm:@opentelemetry/api@1.10.0";

/**
 * The W3C trace context (`traceparent`, and `tracestate` when set) of the
 * active span as HTTP headers; empty when telemetry is off. Deno's own
 * `fetch` already sends it when `OTEL_DENO=true`: call this for requests
 * that do not go through it (an in-process handler, `node:http`, a queue).
 */
export function traceHeaders(): Record<string, string> {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier;
}
