/**
 * The schema check (`schema_check.ts`), called directly on PGlite and
 * PostgreSQL: tables at this program's version with every column pass; a
 * schema with no tables, one at an older version, one changed by hand
 * (a column dropped at the current version), one a newer program migrated,
 * and a connection with no schema in its search_path are each refused with
 * their own code, and a message that names the schema, what is missing (every
 * missing column at once) and the command that fixes it. Each case damages
 * the tables in a transaction the check runs inside, rolled back after.
 */

import assert from "node:assert/strict";
import { pgIgnore, TEST_DATABASE_URL } from "../../tests/_pg.ts";
import { openTestPglite } from "../../tests/_pglite.ts";
import type { CodeOf } from "../base/errors.ts";
import { SCHEMA_VERSION } from "./migrate.ts";
import { createSandbox } from "./sandbox.ts";
import { checkSchema } from "./schema_check.ts";
import { Store } from "./store.ts";

const V = SCHEMA_VERSION;

/** What a damage makes the check say: its code, and the words of its message (`{schema}` stands for the schema). */
interface Case {
  name: string;
  damage: string;
  code?: CodeOf<"StoreError">;
  says?: string;
}

const CASES: Case[] = [
  { name: "tables at this version with every column pass", damage: "" },
  {
    name: "a schema with no tables is SCHEMA_MISSING, saying how to create them",
    damage: "create schema empty_here; set local search_path to empty_here",
    code: "SCHEMA_MISSING",
    says: "has no agent-runtime tables in schema empty_here. Create them with: deno task migrate",
  },
  {
    name: "a column dropped by hand at the current version is SCHEMA_OUTDATED, naming it",
    damage: "alter table memos drop column value",
    code: "SCHEMA_OUTDATED",
    says: `in schema {schema} at {describe} are at version ${V} but lack memos.value (changed by hand?). ` +
      "Restore them, or load a fresh schema",
  },
  {
    name: "every missing column is named at once, across tables, in the order the store reads them",
    damage: "alter table memos drop column value; alter table runs drop column wake_at; drop table approvals",
    code: "SCHEMA_OUTDATED",
    says: "lack runs.wake_at, memos.value, approvals.idempotency_key, approvals.run_id, approvals.seq, " +
      "approvals.tool, approvals.args, approvals.args_hash, approvals.status, approvals.decided_by, approvals.epoch",
  },
  {
    name: "an older version is SCHEMA_OUTDATED, naming both versions and the upgrade",
    damage: `delete from schema_version where version = ${V}`,
    code: "SCHEMA_OUTDATED",
    says: `are at version ${
      V - 1
    }, older than this program's ${V}. Upgrade them in place with: deno task migrate`,
  },
  {
    name: "an older version that lacks columns names them too",
    damage: `delete from schema_version where version = ${V}; alter table messages drop column answered_at`,
    code: "SCHEMA_OUTDATED",
    says: `older than this program's ${V} (they lack messages.answered_at). Upgrade them in place`,
  },
  {
    name: "a newer version is SCHEMA_NEWER: versions are never rolled back",
    damage: `insert into schema_version (version, name) values (${V + 1}, 'from the future')`,
    code: "SCHEMA_NEWER",
    says: `is at schema version ${V + 1}, newer than this program's ${V}`,
  },
  {
    name: "a connection with no schema in its search_path is SCHEMA_UNSET",
    damage: "set local search_path to ''",
    code: "SCHEMA_UNSET",
    says: "has no schema in its search_path",
  },
];

async function checkCases(store: Store, schema: string, t: Deno.TestContext): Promise<void> {
  for (const c of CASES) {
    await t.step(c.name, async () => {
      await store.client.exec(`begin;\n${c.damage}`);
      try {
        const refused = await checkSchema(store.client).then(() => undefined, (e) => e);
        if (c.code === undefined) return assert.equal(refused, undefined);
        assert.equal(refused?.name, "StoreError", String(refused));
        assert.equal(refused.code, c.code);
        const says = c.says!.replace("{schema}", schema).replace("{describe}", store.describe);
        assert.ok(refused.message.includes(says), `${refused.message}\n  does not say\n${says}`);
      } finally {
        await store.client.exec("rollback");
      }
    });
  }
}

Deno.test("checkSchema() passes only the current tables, and says what is wrong (PGlite)", async (t) => {
  const store = new Store(await openTestPglite());
  try {
    await store.migrate();
    await checkCases(store, "agent_runtime", t);
  } finally {
    await store.client.close();
  }
});

Deno.test({
  name: "checkSchema() passes only the current tables, and says what is wrong (PostgreSQL)",
  ignore: pgIgnore("checkSchema() on PostgreSQL"),
  async fn(t) {
    // One connection, so the transaction each case opens is the one the check reads in.
    const pg = await createSandbox(TEST_DATABASE_URL!, { prefix: "t_check", max: 1 });
    try {
      await checkCases(pg.store, pg.schema, t);
    } finally {
      await pg.drop();
    }
  },
});
