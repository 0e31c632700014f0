/**
 * A local OTLP/HTTP receiver for tests: accepts `/v1/traces`, `/v1/metrics`
 * and `/v1/logs` as JSON (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`) and keeps
 * the spans and metric names it was sent.
 *
 * @module
 */

/** An OTLP attribute value (the JSON encoding). */
type AnyValue = {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
};

/** A received span with its attributes flattened to plain values. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  startMs: number;
  endMs: number;
  status: number;
  attributes: Record<string, string | number | boolean>;
}

function plain(v: AnyValue): string | number | boolean {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.doubleValue !== undefined) return v.doubleValue;
  return JSON.stringify(v);
}

function attrs(
  list: { key: string; value: AnyValue }[] | undefined,
): Record<string, string | number | boolean> {
  return Object.fromEntries((list ?? []).map((a) => [a.key, plain(a.value)]));
}

/** The running receiver. */
export interface OtlpReceiver {
  /** `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT`. */
  endpoint: string;
  /** Every span received so far. */
  spans: ReceivedSpan[];
  /** Every metric data point received so far: name, attributes, value. */
  points: { name: string; attributes: Record<string, string | number | boolean>; value: number }[];
  /** Log records received. */
  logs: number;
  /** Stops the server. */
  close(): Promise<void>;
}

/** Starts a receiver on 127.0.0.1 and a free port. */
export function startOtlpReceiver(): OtlpReceiver {
  const spans: ReceivedSpan[] = [];
  const points: OtlpReceiver["points"] = [];
  const out = { spans, points, logs: 0 } as OtlpReceiver;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const path = new URL(req.url).pathname;
    if (req.method !== "POST" || !(req.headers.get("content-type") ?? "").includes("json")) {
      await req.body?.cancel();
      return new Response("json only", { status: 415 });
    }
    // deno-lint-ignore no-explicit-any
    const body = await req.json() as any;
    if (path === "/v1/traces") {
      for (const rs of body.resourceSpans ?? []) {
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              traceId: s.traceId,
              spanId: s.spanId,
              parentSpanId: s.parentSpanId ?? "",
              name: s.name,
              startMs: Number(BigInt(s.startTimeUnixNano) / 1_000_000n),
              endMs: Number(BigInt(s.endTimeUnixNano) / 1_000_000n),
              status: s.status?.code ?? 0,
              attributes: attrs(s.attributes),
            });
          }
        }
      }
    } else if (path === "/v1/metrics") {
      for (const rm of body.resourceMetrics ?? []) {
        for (const sm of rm.scopeMetrics ?? []) {
          for (const m of sm.metrics ?? []) {
            const data = m.sum ?? m.gauge ?? m.histogram;
            for (const p of data?.dataPoints ?? []) {
              points.push({
                name: m.name,
                attributes: attrs(p.attributes),
                value: Number(p.asInt ?? p.asDouble ?? p.count ?? 0),
              });
            }
          }
        }
      }
    } else if (path === "/v1/logs") {
      for (const rl of body.resourceLogs ?? []) {
        for (const sl of rl.scopeLogs ?? []) out.logs += sl.logRecords?.length ?? 0;
      }
    } else {
      return new Response("not found", { status: 404 });
    }
    return Response.json({});
  });
  out.endpoint = `http://127.0.0.1:${server.addr.port}`;
  out.close = () => server.shutdown();
  return out;
}
