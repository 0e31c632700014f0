/**
 * A PostgreSQL server of the test's own, listening on one address it names
 * (the bridge of {@link HostNetwork}, or `127.0.0.1`) with trust for one
 * subnet only: the host tests reach a real server over their virtual links
 * without changing the shared server's `listen_addresses` (a restart, felt by
 * every test using it), and the outage tests stop and start one that nobody
 * else uses. Made with the installed server's `initdb` into a temporary
 * directory owned by the `postgres` user, and removed by {@link PgServer.close};
 * {@link removeStalePgServers} stops and deletes what a killed run left.
 *
 * @module
 */

import postgres from "npm:postgres@3.4.9";
import { HOSTS_PREFIX } from "./hosts.ts";
import { alive } from "./procs.ts";

/** A running server of the test's own. */
export interface PgServer {
  /** `postgres://postgres@ADDRESS:PORT/postgres`. */
  url: string;
  /** Its data directory's parent (the temporary directory). */
  dir: string;
  /**
   * Stops it, as `pg_ctl stop -m MODE` does (waiting until it is down): `fast`
   * ends every session and shuts down cleanly, `immediate` as a crash does.
   */
  stop(mode: "fast" | "immediate"): Promise<void>;
  /** Starts it again after {@link PgServer.stop}, on the same address and port (waiting until it answers). */
  start(): Promise<void>;
  /** Stops it (immediate shutdown) and deletes its directory. Safe to call twice. */
  close(): Promise<void>;
}

/**
 * Why {@link startPgServer} cannot run here (not Linux, not root: the server
 * runs as the `postgres` user; no server binaries), or undefined when it can.
 */
export function pgServerSkipReason(): string | undefined {
  if (Deno.build.os !== "linux") return `a server of the test's own needs Linux; this is ${Deno.build.os}`;
  if (Deno.uid() !== 0) {
    return `a server of the test's own runs as the postgres user, which needs root; uid is ${Deno.uid()}`;
  }
  if (!pgBinDir()) {
    return "no PostgreSQL server binaries (/usr/lib/postgresql/<15 or later>/bin/initdb, pg_ctl)";
  }
  return undefined;
}

/** The newest installed server's bin directory (`/usr/lib/postgresql/<v>/bin`, v 15 or later), if any. */
export function pgBinDir(): string | undefined {
  let versions: number[] = [];
  try {
    versions = [...Deno.readDirSync("/usr/lib/postgresql")].map((e) => Number(e.name))
      .filter((v) => Number.isInteger(v) && v >= 15).sort((a, b) => b - a);
  } catch {
    return undefined;
  }
  const bin = versions.map((v) => `/usr/lib/postgresql/${v}/bin`).find((d) => {
    try {
      return Deno.statSync(`${d}/initdb`).isFile && Deno.statSync(`${d}/pg_ctl`).isFile;
    } catch {
      return false;
    }
  });
  return bin;
}

/** Runs `cmd` as the `postgres` user (initdb refuses root); throws with its output when it fails. */
async function asPostgres(cmd: string[]): Promise<void> {
  const out = await new Deno.Command("runuser", {
    args: ["-u", "postgres", "--", ...cmd],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    const text = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
    throw new Error(`${cmd.join(" ")} failed (${out.code}): ${text.trim().slice(-2000)}`);
  }
}

/** A free TCP port on `address` (bound and released; the server binds it a moment later). */
function freePort(address: string): number {
  const l = Deno.listen({ hostname: address, port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

/**
 * Starts a fresh server listening on `listen` only, with `trust` for
 * `trustCidr` only (and the local socket); `hba` lines come before that rule
 * (a role that must give a password, say). `fsync` is off: the server's own
 * crash safety is not what these tests test.
 */
export async function startPgServer(
  opts: { listen: string; trustCidr: string; hba?: readonly string[] },
): Promise<PgServer> {
  const bin = pgBinDir();
  if (!bin) {
    throw new Error("Cannot start a PostgreSQL server: no /usr/lib/postgresql/<15 or later>/bin/initdb");
  }
  const dir = await Deno.makeTempDir({ prefix: `${HOSTS_PREFIX}${Deno.pid}-pg-` });
  const data = `${dir}/data`;
  let started = false;
  const close = async () => {
    if (started) {
      started = false;
      await asPostgres([`${bin}/pg_ctl`, "-D", data, "-m", "immediate", "-w", "stop"]).catch(() => {});
    }
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  };
  try {
    await chown(dir, "postgres");
    await asPostgres([`${bin}/initdb`, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"]);
    // Only the socket (trust, as initdb wrote) and the test subnet: nothing else may connect.
    await Deno.writeTextFile(
      `${data}/pg_hba.conf`,
      ["local all all trust", ...(opts.hba ?? []), `host all all ${opts.trustCidr} trust`, ""].join("\n"),
    );
    let port = 0;
    const start = async () => {
      const settings = [
        `-c listen_addresses=${opts.listen}`,
        `-p ${port}`,
        `-k ${dir}`,
        "-c fsync=off",
        "-c max_connections=200",
      ].join(" ");
      await asPostgres([
        `${bin}/pg_ctl`,
        "-D",
        data,
        "-o",
        settings,
        "-l",
        `${dir}/server.log`,
        "-w",
        "start",
      ]);
      started = true;
    };
    const stop = async (mode: "fast" | "immediate") => {
      await asPostgres([`${bin}/pg_ctl`, "-D", data, "-m", mode, "-w", "stop"]);
      started = false;
    };
    // The port was free when picked, but another process (another copy of the suite) may bind it before
    // the server does: then the server's log says so, and another port is tried. Bounded: five picks.
    for (let pick = 1;; pick++) {
      port = freePort(opts.listen);
      const logged = await logSize(`${dir}/server.log`);
      try {
        await start();
        break;
      } catch (err) {
        const log = await Deno.readTextFile(`${dir}/server.log`).catch(() => "");
        if (pick >= 5 || !log.slice(logged).includes("Address already in use")) throw err;
      }
    }
    return { url: `postgres://postgres@${opts.listen}:${port}/postgres`, dir, stop, start, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** The length of the file at `path` in characters (0 when there is none yet). */
async function logSize(path: string): Promise<number> {
  return (await Deno.readTextFile(path).catch(() => "")).length;
}

async function chown(path: string, user: string): Promise<void> {
  const out = await new Deno.Command("chown", { args: [user, path], stderr: "piped" }).output();
  if (!out.success) throw new Error(`chown ${user} ${path} failed: ${new TextDecoder().decode(out.stderr)}`);
}

/** Stops and deletes the servers of earlier runs whose process is gone; returns their directories. */
export async function removeStalePgServers(): Promise<string[]> {
  const bin = pgBinDir();
  const tmp = Deno.env.get("TMPDIR") ?? "/tmp";
  const removed: string[] = [];
  for (const e of Deno.readDirSync(tmp)) {
    const m = new RegExp(`^${HOSTS_PREFIX}(\\d+)-pg-`).exec(e.name);
    if (!m || !e.isDirectory || alive(Number(m[1]))) continue;
    const dir = `${tmp}/${e.name}`;
    if (bin) {
      await asPostgres([`${bin}/pg_ctl`, "-D", `${dir}/data`, "-m", "immediate", "stop"]).catch(() => {});
    }
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    removed.push(dir);
  }
  return removed;
}

/** An IPv4 address as a 32-bit number, or undefined for anything else. */
function ipv4(text: string | null): number | undefined {
  const parts = (text ?? "").split(".").map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) return undefined;
  return ((parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]) >>> 0;
}

/** One row of `pg_hba_file_rules`, as {@link hbaRefusal} reads it. */
export interface HbaRule {
  type: string;
  database: string[];
  user_name: string[];
  address: string | null;
  netmask: string | null;
  auth_method: string;
}

/**
 * Why `rules` (in file order) do not let every address of `subnet` in over
 * TCP without a password for `user` on `database`, or undefined when they
 * do: the first rule that matches any address of the subnet must match all
 * of them (an earlier rule for part of it would decide for that part) and be
 * `trust`. `samenet` counts as matching: the subnet is the server's own.
 */
export function hbaRefusal(
  rules: readonly HbaRule[],
  opts: { subnet: string; database: string; user: string },
): string | undefined {
  const [base, bits] = opts.subnet.split("/");
  const subnet = ipv4(base);
  const prefix = Number(bits);
  if (subnet === undefined || !Number.isInteger(prefix) || prefix < 1 || prefix > 32) {
    throw new RangeError(`Cannot read subnet ${JSON.stringify(opts.subnet)}: expected a.b.c.d/n`);
  }
  const subnetMask = (~0 << (32 - prefix)) >>> 0;
  for (const r of rules) {
    const tcp = r.type === "host" || r.type === "hostnossl";
    const forUs = (r.database.includes("all") || r.database.includes(opts.database)) &&
      (r.user_name.includes("all") || r.user_name.includes(opts.user));
    if (!tcp || !forUs) continue;
    let covers = r.address === "all" || r.address === "samenet";
    if (!covers) {
      const addr = ipv4(r.address);
      const mask = ipv4(r.netmask);
      if (addr === undefined || mask === undefined) continue; // a host name, samehost: not the subnet
      const common = (mask & subnetMask) >>> 0;
      if (((subnet & common) >>> 0) !== ((addr & common) >>> 0)) continue; // no address of the subnet
      covers = common === mask; // the rule's range holds the whole subnet
      if (!covers) return `pg_hba.conf decides for part of ${opts.subnet} only (${r.address}/${r.netmask})`;
    }
    if (r.auth_method !== "trust") {
      return `the pg_hba.conf rule for ${opts.subnet} asks for ${r.auth_method}, not trust`;
    }
    return undefined;
  }
  return `no pg_hba.conf rule lets in ${opts.subnet}`;
}

/**
 * Whether the server at `serverUrl` can serve hosts on `subnet` at `address`
 * (the bridge's): it listens there (`listen_addresses` is `*`, `0.0.0.0` or
 * names the address) and the first `pg_hba.conf` rule that matches a TCP
 * connection from the subnet, for the URL's user and database, is `trust`.
 * Returns the URL to use from the hosts (the same, with `address` as its
 * host), or why not. Reads `pg_hba_file_rules`, so the URL's user must be a
 * superuser.
 */
export async function serverForHosts(
  serverUrl: string,
  opts: { address: string; subnet: string },
): Promise<{ url: string } | { reason: string }> {
  const u = new URL(serverUrl);
  const sql = postgres(serverUrl, { max: 1, onnotice: () => {}, connect_timeout: 5 });
  try {
    const [{ listen_addresses: listen }] =
      await sql`select current_setting('listen_addresses') as listen_addresses`;
    const listening = String(listen).split(",").map((a) => a.trim());
    if (!listening.some((a) => a === "*" || a === "0.0.0.0" || a === opts.address)) {
      return { reason: `it listens on ${listen} only (listen_addresses), not on ${opts.address}` };
    }
    const [db, user] = [
      decodeURIComponent(u.pathname.slice(1)) || "postgres",
      decodeURIComponent(u.username),
    ];
    const rules = await sql<HbaRule[]>`select type, database, user_name, address, netmask, auth_method
        from pg_hba_file_rules where error is null order by line_number`;
    const refusal = hbaRefusal(rules, { subnet: opts.subnet, database: db, user });
    if (refusal) return { reason: refusal };
    u.hostname = opts.address;
    return { url: u.toString() };
  } finally {
    await sql.end({ timeout: 1 });
  }
}
