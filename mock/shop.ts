/**
 * `MockShop`: a shop's API for the support example (`examples/support/`), in
 * memory. `GET /orders/:id` looks an order up; `POST /tickets` opens a ticket
 * once per `Idempotency-Key`, answering a repeated key with the ticket it
 * opened the first time (`replayed: true`) and a repeated key with another
 * body with 422. It counts requests per key, so a test can tell an effect
 * done once from one done twice. A leaf: it imports nothing.
 *
 * @module
 */

/** A ticket the shop opened. */
export interface ShopTicket {
  /** `T-<n>`, in the order they were opened. */
  id: string;
  /** The idempotency key of the request that opened it. */
  key: string;
  /** The order it is about. */
  order: string;
  /** What the ticket says. */
  note: string;
}

/** The in-memory shop. */
export class MockShop {
  readonly #tickets = new Map<string, ShopTicket & { body: string }>();
  readonly #requests = new Map<string, number>();
  #lookups = 0;
  #conflicts = 0;

  /** Tickets opened, oldest first. */
  tickets(): ShopTicket[] {
    return [...this.#tickets.values()].map(({ body: _, ...t }) => t);
  }

  /** Ticket requests by idempotency key (repeats included). */
  requestsByKey(): Record<string, number> {
    return Object.fromEntries(this.#requests);
  }

  /** Order lookups answered. */
  get lookups(): number {
    return this.#lookups;
  }

  /** Requests refused because a used key came with another body. */
  get conflicts(): number {
    return this.#conflicts;
  }

  /** Answers one request. */
  handler = async (req: Request): Promise<Response> => {
    const url = new URL(req.url);
    const order = /^\/orders\/([^/]+)$/.exec(url.pathname);
    if (req.method === "GET" && order) {
      await req.body?.cancel();
      this.#lookups++;
      const id = decodeURIComponent(order[1]);
      return Response.json({ id, status: "in transit", carrier: "mock-post", eta_days: id.length % 5 + 1 });
    }
    if (req.method === "POST" && url.pathname === "/tickets") {
      const key = req.headers.get("idempotency-key");
      const body = await req.text();
      if (!key) return Response.json({ error: "an Idempotency-Key header is required" }, { status: 400 });
      this.#requests.set(key, (this.#requests.get(key) ?? 0) + 1);
      const seen = this.#tickets.get(key);
      if (seen) {
        if (seen.body !== body) {
          this.#conflicts++;
          return Response.json({ error: "this key was used with another body" }, { status: 422 });
        }
        return Response.json({ id: seen.id, replayed: true });
      }
      let parsed: { order?: unknown; note?: unknown };
      try {
        parsed = JSON.parse(body);
      } catch {
        return Response.json({ error: "the body is not JSON" }, { status: 400 });
      }
      const ticket = {
        id: `T-${this.#tickets.size + 1}`,
        key,
        order: String(parsed.order ?? ""),
        note: String(parsed.note ?? ""),
        body,
      };
      this.#tickets.set(key, ticket);
      return Response.json({ id: ticket.id, replayed: false }, { status: 201 });
    }
    await req.body?.cancel();
    return Response.json({ error: `no route ${req.method} ${url.pathname}` }, { status: 404 });
  };
}

/**
 * Serves `shop` on 127.0.0.1 (`port` 0: any free port) until the returned
 * `close`; serving it again on the same port after a close is how a test
 * takes the shop down and brings it back, its state kept.
 */
export function serveShop(shop: MockShop, port = 0): { url: string; port: number; close(): Promise<void> } {
  const server = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, shop.handler);
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    port: server.addr.port,
    close: () => server.shutdown(),
  };
}
