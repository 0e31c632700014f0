import assert from "node:assert/strict";
import { z } from "zod";
import { argsFromSchema } from "./schema_args.ts";

/** Generates arguments for a zod schema's input JSON Schema and checks that zod accepts them. */
function roundTrip(schema: z.ZodType, n = 7): unknown {
  const json = z.toJSONSchema(schema, { io: "input" });
  const args = argsFromSchema(json, { n });
  const parsed = schema.safeParse(args);
  assert.ok(parsed.success, `${JSON.stringify(args)}: ${parsed.error?.message}`);
  return args;
}

Deno.test("arguments generated from zod 4 schemas validate against them", async (t) => {
  const schemas: Record<string, z.ZodType> = {
    "strings with regex, enums and bounded ints": z.strictObject({
      name: z.string().regex(/^[a-z][a-z0-9-]{2,30}$/),
      code: z.string().regex(/^[A-Z]{3}$/),
      zip: z.string().regex(/^\d{5}(-\d{4})?$/),
      spec: z.enum(["small", "medium", "large"]),
      size_gb: z.number().int().min(10).max(16_384),
      replicas: z.int().min(-5).max(-2),
    }),
    "nested objects, arrays with a minimum and optional fields": z.strictObject({
      owner: z.strictObject({
        email: z.email(),
        id: z.uuid(),
        nickname: z.string().min(3).max(5).optional(),
        address: z.strictObject({ city: z.string(), lines: z.array(z.string().min(1)).min(2) }).optional(),
      }),
      tags: z.array(z.string().max(3)).min(3),
      members: z.array(z.strictObject({ id: z.uuidv4(), admin: z.boolean() })).min(1),
      notes: z.array(z.string()),
      label: z.string().optional(),
    }),
    "number bounds and steps": z.strictObject({
      ratio: z.number().gt(0).lt(1),
      pos: z.number().positive(),
      neg: z.int().negative(),
      step: z.number().multipleOf(5).min(7),
      small: z.number().max(-0.5),
      count: z.int().nonnegative().max(0),
      dec: z.number().multipleOf(0.25).gt(1),
    }),
    "formats and string checks": z.strictObject({
      url: z.url(),
      at: z.iso.datetime(),
      day: z.iso.date(),
      time: z.iso.time(),
      ip: z.ipv4(),
      ip6: z.ipv6(),
      host: z.hostname(),
      cuid: z.cuid(),
      nano: z.nanoid(),
      prefixed: z.string().startsWith("ab").endsWith("yz"),
      contains: z.string().includes("mid"),
      exact: z.string().length(12),
      lower: z.string().lowercase(),
      long_name: z.string().min(40),
    }),
    "literals, unions, nullables, defaults, tuples and records": z.strictObject({
      kind: z.literal("vm"),
      either: z.union([z.number().int().min(3), z.string()]),
      choice: z.discriminatedUnion("type", [
        z.strictObject({ type: z.literal("a"), x: z.int() }),
        z.strictObject({ type: z.literal("b") }),
      ]),
      maybe: z.string().email().nullable(),
      maybe_obj: z.strictObject({ a: z.string() }).nullable(),
      region: z.string().default("eu-west-1"),
      pair: z.tuple([z.string(), z.number().int()]),
      limits: z.record(z.string(), z.number()),
      by_env: z.record(z.enum(["dev", "prod"]), z.boolean()),
      both: z.intersection(z.object({ a: z.string() }), z.object({ b: z.number() })),
    }),
  };
  for (const [name, schema] of Object.entries(schemas)) {
    await t.step(name, () => {
      roundTrip(schema);
    });
  }

  await t.step("a recursive schema ends", () => {
    type Node = { name: string; next?: Node; children: Node[] };
    const node: z.ZodType<Node> = z.lazy(() =>
      z.strictObject({ name: z.string(), next: node.optional(), children: z.array(node) })
    );
    roundTrip(z.strictObject({ root: node }));
  });
});

Deno.test("generated values follow the documented choices", () => {
  const schema = z.strictObject({
    name: z.string(),
    email: z.email(),
    site: z.url(),
    id: z.uuid(),
    at: z.iso.datetime(),
    spec: z.enum(["small", "large"]),
    size: z.int().min(10).max(20),
    count: z.int(),
    on: z.boolean(),
    tags: z.array(z.string()).min(2),
    none: z.array(z.string()),
    region: z.string().default("eu-west-1"),
    short: z.string().max(3),
    padded: z.string().min(12),
    slug: z.string().regex(/^[a-z]+-\d+$/),
    nothing: z.null(),
    maybe: z.number().nullable(),
  });
  assert.deepEqual(roundTrip(schema, 42), {
    name: "name-42",
    email: "user-42@example.test",
    site: "https://example.test/42",
    id: "00000000-0000-4000-8000-000000000042",
    at: "2030-01-01T00:00:00Z",
    spec: "small",
    size: 10,
    count: 1,
    on: true,
    tags: ["tags-42", "tags-42"],
    none: [],
    region: "eu-west-1",
    short: "sho",
    padded: "padded-42xxx",
    slug: "slug-42",
    nothing: null,
    maybe: 1,
  });
});

Deno.test("a pattern no candidate fits is sampled from the regex", () => {
  assert.equal(argsFromSchema({ type: "string", pattern: "^[A-Z]{3}$" }, { n: 1, name: "code" }), "AAA");
  assert.equal(argsFromSchema({ type: "string", pattern: "^(?:ab|cd)\\d{2}$" }, { n: 1 }), "ab00");
});

Deno.test("plain JSON Schema: additionalProperties, type arrays, $ref and the top-level name", () => {
  const schema = {
    type: "object",
    properties: {
      a: { type: ["null", "integer"], exclusiveMinimum: 1 },
      b: { $ref: "#/$defs/thing" },
      c: { oneOf: [{ type: "string", const: "first" }, { type: "number" }] },
    },
    required: ["a", "z"],
    additionalProperties: false,
    $defs: { thing: { type: "object", properties: { x: { type: "string" } } } },
  };
  assert.deepEqual(argsFromSchema(schema, { n: 3 }), { a: 2, b: { x: "x-3" }, c: "first" });
  // Without additionalProperties: false, required names without a schema are filled in too.
  assert.deepEqual(argsFromSchema({ ...schema, additionalProperties: undefined }, { n: 3 }), {
    a: 2,
    b: { x: "x-3" },
    c: "first",
    z: "z-3",
  });
  assert.equal(argsFromSchema({ type: "string" }, { n: 5, name: "deploy" }), "deploy-5");
  assert.equal(argsFromSchema({ type: "string" }, { n: 5 }), "value-5");
  assert.deepEqual(argsFromSchema({}, { n: 5 }), "value-5");
});

Deno.test("the same inputs give the same output, and n changes the strings", () => {
  const schema = z.toJSONSchema(
    z.strictObject({ name: z.string(), email: z.email(), id: z.uuid(), n: z.int().min(2) }),
    { io: "input" },
  );
  const first = argsFromSchema(schema, { n: 9 });
  assert.deepEqual(argsFromSchema(schema, { n: 9 }), first);
  assert.equal(JSON.stringify(argsFromSchema(schema, { n: 9 })), JSON.stringify(first));
  assert.notDeepEqual(argsFromSchema(schema, { n: 10 }), first);
});
