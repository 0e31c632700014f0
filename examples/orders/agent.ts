// An agent that waits for an event from outside: the order is shipped only once its payment arrives.
// `wait_for_payment` waits for the signal `payment-received`, sent to the run by the payment provider's
// webhook (client.signal) or by hand (`deno task signal RUN payment-received --payload '{...}'`), holding
// no worker's slot meanwhile; a signal sent before the wait is kept, and one sent twice under one id is
// one. `ship_order` writes the shipment to a folder (ORDERS_DIR, default DATA_DIR/orders), named by the
// call's key, so a re-sent call finds the first one. PAYMENT_WAIT_S bounds the wait (default a day).
import { z } from "zod";
import { defineAgent, defineTool } from "../../mod.ts";
import { waitForSignal } from "../../tools.ts";

export default defineAgent({
  name: "orders",
  instructions: "An order was placed. Wait for its payment with wait_for_payment. If it was paid, ship it " +
    "with ship_order; if the wait timed out, do not ship. Then say what happened.",
  defaultInput: "Order 1042: one blue kettle.",
  tools: (ctx) => [
    waitForSignal("payment-received", {
      name: "wait_for_payment",
      deadlineMs: Number(ctx.env.PAYMENT_WAIT_S ?? 86_400) * 1000,
    }),
    defineTool({
      name: "ship_order",
      description: "Ships the order. Returns the shipment's tracking id.",
      args: z.strictObject({ order: z.string().min(1).max(200) }),
      run: async ({ order }, { idempotencyKey }) => {
        const dir = ctx.env.ORDERS_DIR ?? `${ctx.dataDir}/orders`;
        await Deno.mkdir(dir, { recursive: true });
        const tracking = `trk-${idempotencyKey.replaceAll(":", "-")}`;
        try {
          await Deno.writeTextFile(`${dir}/${tracking}.txt`, `${order}\n`, { createNew: true });
          return { result: { tracking }, remote: "created" };
        } catch (err) {
          if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
          return { result: { tracking }, remote: "already_done" }; // shipped before a crash: not again
        }
      },
    }),
  ],
});
