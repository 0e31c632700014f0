// A support agent whose tools reach a shop's API with plain fetch (SHOP_URL; `mock/shop.ts` serves one).
// Nothing in it handles an outage: a refused connection, a timeout or a 5xx is retried by the runtime under
// the call's key until the retry horizon, and the run waits in between holding no worker slot. A lookup
// that still fails past its horizon becomes its answer ("the order system is unavailable"), so the
// model can tell the customer; a ticket is an effect, so it is never given up silently: the run fails and
// 'deno task reopen' sends it again under the same key once the shop is back.
import { z } from "zod";
import { defineAgent, defineTool, ToolError } from "../../mod.ts";
import { idempotencyKeyHeader, isTransientStatus, parseRetryAfter } from "../../tools.ts";

/** A refused answer as a tool error: transient (retried) for 408, 409, 429 and 5xx, with its Retry-After. */
async function refused(res: Response, what: string): Promise<never> {
  const text = await res.text();
  throw new ToolError("SHOP_HTTP", `${what}: HTTP ${res.status}: ${text.slice(0, 200)}`, {
    transient: isTransientStatus(res.status),
    retryAfterMs: parseRetryAfter(res.headers.get("retry-after")),
  });
}

export default defineAgent({
  name: "support",
  instructions: "You answer a customer's question about an order. Look the order up with lookup_order; " +
    "open a ticket with open_ticket when the customer needs one; then answer the customer in one sentence.",
  defaultInput: "Where is my order A-1001? It is late; please open a ticket.",
  tools: (ctx) => {
    const shop = ctx.env.SHOP_URL ?? "http://127.0.0.1:9200";
    return [
      defineTool({
        name: "lookup_order",
        description: "Looks an order up by its id: its status, carrier and days to delivery.",
        args: z.strictObject({ order: z.string().min(1).max(40) }),
        onGiveUp: "answer",
        run: async ({ order }, { signal }) => {
          const res = await fetch(`${shop}/orders/${encodeURIComponent(order)}`, { signal });
          if (!res.ok) await refused(res, "lookup_order");
          return { result: await res.json() };
        },
      }),
      defineTool({
        name: "open_ticket",
        description: "Opens a support ticket about an order. Returns the ticket's id.",
        args: z.strictObject({ order: z.string().min(1).max(40), note: z.string().max(500) }),
        run: async ({ order, note }, { idempotencyKey, signal }) => {
          const res = await fetch(`${shop}/tickets`, {
            method: "POST",
            headers: {
              "content-type": "application/json",
              "idempotency-key": idempotencyKeyHeader(idempotencyKey),
            },
            body: JSON.stringify({ order, note }),
            signal,
          });
          if (!res.ok) await refused(res, "open_ticket");
          const body = await res.json();
          return { result: body.id, remote: body.replayed ? "already_done" : "created" };
        },
      }),
    ];
  },
});
