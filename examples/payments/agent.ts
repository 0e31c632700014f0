/**
 * An agent whose one tool takes no idempotency key: `charge_card`, against
 * the (mock) cloud's payments endpoint, charges again on every request. A
 * re-send after an unknown outcome could charge twice, so the tool is
 * `idempotent: false`; but each charge carries the call's key as its
 * `reference`, and the tool's `reconcile` looks it up by that reference. So
 * after a crash (or a lost answer) the runtime asks the remote instead of a
 * person: found, the call is confirmed as `reconciled`; not found, it is sent
 * now; only when the lookup cannot tell is the call flagged.
 *
 * ```sh
 * CRASH_AT=after_call deno task run --agent examples/payments/agent.ts --run-id pay1   # dies after the charge
 * deno task run --agent examples/payments/agent.ts --run-id pay1    # reconcile finds it: no second charge
 * ```
 *
 * @module
 */

import { z } from "npm:zod@4.6.7";
import { defineAgent, defineTool, type Json, type Tool } from "../../mod.ts";
import { demoCloud } from "../provision/agent.ts";
import { cloudJson, type DemoToolsOptions } from "../provision/tools.ts";

/** `charge_card` against `opts.cloudUrl`'s `POST /v1/charges`, found again by `GET /v1/charges?reference=`. */
export function chargeCard(opts: DemoToolsOptions): Tool {
  return defineTool({
    name: "charge_card",
    description: "Charge the customer's card. Returns the charge id.",
    args: z.strictObject({ amount_cents: z.number().int().min(1).max(1_000_000) }),
    idempotent: false,
    timeoutMs: opts.timeoutMs,
    run: async (args, ctx) => {
      const { body } = await cloudJson(opts, {
        method: "POST",
        path: "/v1/charges",
        body: { ...args, reference: ctx.idempotencyKey },
        ctx,
      });
      return { result: chargeId(body, "POST /v1/charges") };
    },
    // Throwing (the lookup failed) counts as "cannot tell": the call is flagged for a person.
    reconcile: async (_args, ctx) => {
      const { body } = await cloudJson(opts, {
        method: "GET",
        path: `/v1/charges?reference=${encodeURIComponent(ctx.idempotencyKey)}`,
        ctx,
      });
      const found = (body as { data?: Json[] } | null)?.data;
      if (!Array.isArray(found)) return { status: "unknown", reason: "the lookup answered without a list" };
      if (found.length === 0) return { status: "not_happened" };
      if (found.length > 1) {
        return { status: "unknown", reason: `${found.length} charges carry reference ${ctx.idempotencyKey}` };
      }
      return { status: "happened", result: chargeId(found[0], "GET /v1/charges") };
    },
  });
}

function chargeId(charge: Json, what: string): string {
  const id = (charge as { id?: unknown } | null)?.id;
  if (typeof id !== "string") throw new Error(`${what} answered without a charge id`);
  return id;
}

/** The payments agent. */
export default defineAgent({
  name: "payments",
  instructions: "Charge the customer's card for the amount the user asks for, then say what was charged.",
  defaultInput: "Charge 12.99 for the order.",
  tools: async (ctx) => {
    const { url, fetch } = await demoCloud(ctx);
    return [chargeCard({ cloudUrl: url, fetch })];
  },
});
