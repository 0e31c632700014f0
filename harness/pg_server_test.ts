import assert from "node:assert/strict";
import { hbaRefusal, type HbaRule } from "./pg_server.ts";

const rule = (
  type: string,
  address: string | null,
  netmask: string | null,
  auth: string,
  more: Partial<HbaRule> = {},
) => ({
  type,
  database: ["all"],
  user_name: ["all"],
  address,
  netmask,
  auth_method: auth,
  ...more,
});
const LOCAL = rule("local", null, null, "trust");
const LOOPBACK = rule("host", "127.0.0.1", "255.255.255.255", "trust");
const want = { subnet: "10.213.4.0/24", database: "postgres", user: "postgres" };

Deno.test("hbaRefusal() lets a subnet in only when the first rule that matches any of it trusts all of it", async (t) => {
  const cases: [string, HbaRule[], RegExp | undefined][] = [
    ["a server of loopback alone", [LOCAL, LOOPBACK], /no pg_hba.conf rule lets in 10\.213\.4\.0\/24/],
    [
      "trust for a wider range",
      [LOCAL, LOOPBACK, rule("host", "10.213.0.0", "255.255.0.0", "trust")],
      undefined,
    ],
    ["trust for exactly the subnet", [rule("host", "10.213.4.0", "255.255.255.0", "trust")], undefined],
    [
      "trust for another /24 of the range",
      [rule("host", "10.213.5.0", "255.255.255.0", "trust")],
      /no pg_hba/,
    ],
    [
      "a password for everyone",
      [rule("host", "0.0.0.0", "0.0.0.0", "scram-sha-256")],
      /asks for scram-sha-256/,
    ],
    ["`all` with trust", [rule("host", "all", null, "trust")], undefined],
    ["`samenet` with trust", [rule("host", "samenet", null, "trust")], undefined],
    [
      "a reject for one host of it before the trust",
      [
        rule("host", "10.213.4.10", "255.255.255.255", "reject"),
        rule("host", "10.213.0.0", "255.255.0.0", "trust"),
      ],
      /for part of 10\.213\.4\.0\/24 only/,
    ],
    [
      "a reject for the whole range before the trust",
      [rule("host", "10.0.0.0", "255.0.0.0", "reject"), rule("host", "10.213.4.0", "255.255.255.0", "trust")],
      /asks for reject/,
    ],
    ["TLS-only rules do not count", [rule("hostssl", "10.213.0.0", "255.255.0.0", "trust")], /no pg_hba/],
    [
      "a rule for another database does not count",
      [rule("host", "10.213.0.0", "255.255.0.0", "trust", { database: ["other"] })],
      /no pg_hba/,
    ],
    ["a rule for a host name is skipped", [rule("host", "db.example", null, "trust")], /no pg_hba/],
  ];
  for (const [name, rules, expected] of cases) {
    await t.step(name, () => {
      const got = hbaRefusal(rules, want);
      if (expected === undefined) assert.equal(got, undefined);
      else assert.match(got ?? "(admitted)", expected);
    });
  }
});

Deno.test("hbaRefusal() refuses a subnet it cannot read, naming it", () => {
  assert.throws(
    () => hbaRefusal([], { ...want, subnet: "10.213.4.0" }),
    /Cannot read subnet "10\.213\.4\.0"/,
  );
  assert.throws(() => hbaRefusal([], { ...want, subnet: "10.213.4.0/40" }), /expected a\.b\.c\.d\/n/);
});
