/**
 * A PostgreSQL that fails over, on this machine: a pg_auto_failover monitor
 * and two data nodes (a primary and its synchronous standby) on free local
 * ports, in a temporary directory, run as the `postgres` user (pg_autoctl
 * refuses root). The runtime connects through {@link FailoverCluster.url},
 * a URL naming both nodes with `target_session_attrs=read-write`.
 *
 * The monitor's health checks are shortened (a check a second, a node unhealthy
 * after 2 s, the old primary given 3 s to demote), so a failover takes seconds
 * instead of the defaults' half a minute. {@link FailoverCluster.killNode}
 * SIGKILLs a node's postmaster together with its pg_autoctl keeper, as when the
 * host dies: killed alone, the postmaster is restarted in place by its keeper
 * and nothing fails over.
 *
 * Needs root and the Debian packages `postgresql-15-auto-failover` and
 * `pg-auto-failover-cli`; {@link failoverSkipReason} says what is missing.
 *
 * @module
 */

const PG_BIN = "/usr/lib/postgresql/15/bin";
const PG_AUTOCTL = "/usr/bin/pg_autoctl";
const OS_USER = "postgres";

/** Why the cluster cannot be built here (not root, a package missing), or undefined when it can. */
export function failoverSkipReason(): string | undefined {
  if (Deno.uid() !== 0) {
    return "not root: pg_autoctl runs as the postgres user, which needs root to switch to";
  }
  for (const [path, pkg] of [[PG_AUTOCTL, "pg-auto-failover-cli"], [`${PG_BIN}/pg_ctl`, "postgresql-15"]]) {
    try {
      Deno.statSync(path);
    } catch {
      return `${path} is missing (apt-get install -y ${pkg} postgresql-15-auto-failover)`;
    }
  }
  try {
    Deno.statSync("/usr/share/postgresql/15/extension/pgautofailover.control");
  } catch {
    return "the pgautofailover extension is missing (apt-get install -y postgresql-15-auto-failover)";
  }
  return undefined;
}

/** One PostgreSQL server of the cluster (the monitor or a data node). */
export interface FailoverNode {
  /** `monitor`, `node1` or `node2` (the data nodes' names at the monitor). */
  name: string;
  port: number;
  pgdata: string;
}

/** A data node as the monitor sees it. */
export interface NodeState {
  name: string;
  port: number;
  /** What the node's keeper last reported (`primary`, `secondary`, `wait_primary`, ...). */
  reported: string;
  /** What the monitor assigned it. */
  assigned: string;
}

/** What {@link FailoverCluster.killNode} did. */
export interface NodeKill {
  /** `Date.now()` just before the first signal. */
  killedAtMs: number;
  /** The node's postmaster pid. */
  postmasterPid: number;
  /** Every pid signalled: the keeper, its services, the postmaster and its backends. */
  pids: number[];
}

interface Keeper {
  node: FailoverNode;
  child: Deno.ChildProcess;
}

/** Options of {@link FailoverCluster.start}. */
export interface FailoverOptions {
  /** The database the data nodes serve. Default `test`. */
  dbname?: string;
  /** How long to wait for the standby to reach `secondary`. Default 90 000. */
  readyTimeoutMs?: number;
}

/**
 * `count` free TCP ports on 127.0.0.1, all different: each is held until
 * every one is picked (picked and let go one by one, the second may be the
 * first again).
 */
function freePorts(count: number): number[] {
  const held = Array.from({ length: count }, () => Deno.listen({ hostname: "127.0.0.1", port: 0 }));
  const ports = held.map((l) => (l.addr as Deno.NetAddr).port);
  for (const l of held) l.close();
  return ports;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every descendant of `pid` (children first found by walking /proc), `pid` included. */
function processTree(pid: number): number[] {
  const parents = new Map<number, number[]>();
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      // The command name is in parentheses and may hold spaces: the fields after its ')' are fixed.
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      parents.set(ppid, [...(parents.get(ppid) ?? []), Number(entry.name)]);
    } catch {
      // the process ended while we looked
    }
  }
  const out: number[] = [];
  const queue = [pid];
  // Bounded by the process table: each pid is visited once.
  while (queue.length > 0 && out.length < 100_000) {
    const p = queue.shift()!;
    out.push(p);
    queue.push(...(parents.get(p) ?? []));
  }
  return out;
}

function kill(pids: number[]): void {
  for (const pid of pids) {
    try {
      Deno.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
}

/** The postmaster pid and the shared memory id in `pgdata/postmaster.pid`, if the file is there. */
function postmasterOf(pgdata: string): { pid: number; shmid?: number } | undefined {
  try {
    const lines = Deno.readTextFileSync(`${pgdata}/postmaster.pid`).split("\n");
    const shm = lines[6]?.trim().split(/\s+/);
    return { pid: Number(lines[0]), shmid: shm?.length === 2 ? Number(shm[1]) : undefined };
  } catch {
    return undefined;
  }
}

/** A monitor and two data nodes managed by pg_auto_failover, torn down by {@link FailoverCluster.stop}. */
export class FailoverCluster {
  /** The temporary directory holding every data directory, config and log. */
  readonly dir: string;
  readonly monitor: FailoverNode;
  readonly nodes: FailoverNode[];
  readonly dbname: string;
  readonly #keepers: Keeper[] = [];
  readonly #shmids = new Set<number>();

  private constructor(dir: string, monitor: FailoverNode, nodes: FailoverNode[], dbname: string) {
    this.dir = dir;
    this.monitor = monitor;
    this.nodes = nodes;
    this.dbname = dbname;
  }

  /**
   * The URL the runtime uses: both data nodes, the one that takes writes
   * chosen at each connection (`target_session_attrs=read-write`).
   */
  get url(): string {
    const hosts = this.nodes.map((n) => `127.0.0.1:${n.port}`).join(",");
    return `postgres://postgres@${hosts}/${this.dbname}?target_session_attrs=read-write&sslmode=disable`;
  }

  /** The URL of one node alone. */
  nodeUrl(node: FailoverNode): string {
    return `postgres://postgres@127.0.0.1:${node.port}/${
      node === this.monitor ? "pg_auto_failover" : this.dbname
    }`;
  }

  /**
   * Builds the monitor and both data nodes and waits until the first is
   * `primary` with the second its `secondary`. Everything it started is
   * stopped again if it fails.
   */
  static async start(opts: FailoverOptions = {}): Promise<FailoverCluster> {
    const reason = failoverSkipReason();
    if (reason) throw new Error(`Cannot build a failover cluster: ${reason}`);
    const dir = await Deno.makeTempDir({ prefix: "failover-" });
    await Deno.chmod(dir, 0o755);
    await chown(dir);
    const [pm, p1, p2] = freePorts(3);
    const cluster = new FailoverCluster(
      dir,
      { name: "monitor", port: pm, pgdata: `${dir}/monitor` },
      [
        { name: "node1", port: p1, pgdata: `${dir}/node1` },
        { name: "node2", port: p2, pgdata: `${dir}/node2` },
      ],
      opts.dbname ?? "test",
    );
    try {
      await cluster.#build(opts.readyTimeoutMs ?? 90_000);
      return cluster;
    } catch (err) {
      await cluster.stop();
      throw err;
    }
  }

  async #build(readyTimeoutMs: number): Promise<void> {
    const { monitor, nodes } = this;
    await this.#autoctl(
      ["create", "monitor", "--pgctl", `${PG_BIN}/pg_ctl`, "--pgdata", monitor.pgdata, "--pgport"]
        .concat([String(monitor.port), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"]),
      "monitor-create",
    );
    this.#keep(monitor, ["run", "--pgdata", monitor.pgdata]);
    await this.#waitReady(monitor, 30_000);
    // Seconds, not the defaults' tens of seconds: a check a second, unhealthy
    // after 2 s, and the old primary given 3 s to demote before the standby
    // is promoted.
    for (
      const [name, value] of [
        ["health_check_period", 1000],
        ["health_check_timeout", 1000],
        ["health_check_max_retries", 1],
        ["health_check_retry_delay", 500],
        ["node_considered_unhealthy_timeout", 2000],
        ["primary_demote_timeout", 3000],
      ]
    ) await this.psql(monitor, `alter system set pgautofailover.${name} = ${value}`);
    await this.psql(monitor, "select pg_reload_conf()");
    const monitorUrl = `postgres://autoctl_node@127.0.0.1:${monitor.port}/pg_auto_failover?sslmode=disable`;
    for (const [i, node] of nodes.entries()) {
      this.#keep(node, [
        "create",
        "postgres",
        "--pgctl",
        `${PG_BIN}/pg_ctl`,
        "--pgdata",
        node.pgdata,
        "--pgport",
        String(node.port),
        "--listen",
        "127.0.0.1",
        "--hostname",
        "127.0.0.1",
        "--name",
        node.name,
        "--dbname",
        this.dbname,
        "--monitor",
        monitorUrl,
        "--auth",
        "trust",
        "--no-ssl",
        "--run",
      ]);
      const want = i === 0 ? ["single"] : ["primary", "secondary"];
      const deadline = Date.now() + readyTimeoutMs;
      // Bounded by the deadline.
      for (;;) {
        const states = await this.states().catch(() => []);
        const reported = nodes.slice(0, i + 1).map((n) => states.find((s) => s.name === n.name)?.reported);
        if (reported.every((r, j) => r === want[j])) break;
        if (Date.now() > deadline) {
          throw new Error(`The cluster did not become ${want.join("+")} in time: ${JSON.stringify(states)}`);
        }
        // pg_basebackup of the standby waits for a spread checkpoint on the
        // primary (minutes with the defaults); ask for an immediate one.
        if (i > 0 && reported[1] !== "secondary") await this.psql(nodes[0], "checkpoint").catch(() => {});
        await sleep(500);
      }
    }
  }

  /** Runs one SQL statement with psql on `node`; resolves with its output rows (fields split on '|'). */
  async psql(node: FailoverNode, sql: string): Promise<string[][]> {
    const { code, stdout, stderr } = await new Deno.Command(`${PG_BIN}/psql`, {
      args: ["-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", this.nodeUrl(node), "-c", sql],
      env: { PGCONNECT_TIMEOUT: "2" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(stdout);
    if (code !== 0) throw new Error(`psql on ${node.name}: ${new TextDecoder().decode(stderr).trim()}`);
    return text.split("\n").filter((l) => l !== "").map((l) => l.split("|"));
  }

  /** The data nodes as the monitor sees them. */
  async states(): Promise<NodeState[]> {
    const rows = await this.psql(
      this.monitor,
      "select nodename, nodeport, reportedstate, goalstate from pgautofailover.node order by nodeid",
    );
    return rows.map(([name, port, reported, assigned]) => ({ name, port: Number(port), reported, assigned }));
  }

  /** The data node the monitor has as primary (reported and assigned), if any. */
  async primary(): Promise<FailoverNode | undefined> {
    const states = await this.states();
    const s = states.find((s) =>
      s.reported === s.assigned && ["primary", "wait_primary"].includes(s.reported)
    );
    return s && this.nodes.find((n) => n.name === s.name);
  }

  /**
   * SIGKILLs `node`'s postmaster, its backends and its pg_autoctl keeper at
   * once, as when its host dies (the keeper alone would restart the
   * postmaster in place).
   */
  killNode(node: FailoverNode): NodeKill {
    const pm = postmasterOf(node.pgdata);
    if (!pm) throw new Error(`${node.name} has no postmaster.pid: is it running?`);
    if (pm.shmid !== undefined) this.#shmids.add(pm.shmid);
    const keeper = this.#keepers.find((k) => k.node === node);
    const pids = [...new Set([...processTree(pm.pid), ...(keeper ? processTree(keeper.child.pid) : [])])];
    const killedAtMs = Date.now();
    kill([pm.pid, ...pids]);
    return { killedAtMs, postmasterPid: pm.pid, pids };
  }

  /**
   * The standbys `node` streams to now, as its `pg_stat_replication` shows
   * them: each one's name and `sync_state` (`sync`: every commit waits for it).
   */
  async replication(node: FailoverNode): Promise<{ standby: string; syncState: string }[]> {
    const rows = await this.psql(node, "select application_name, sync_state from pg_stat_replication");
    return rows.map(([standby, syncState]) => ({ standby, syncState }));
  }

  /** `synchronous_standby_names` and `synchronous_commit` on `node`. */
  async syncSettings(node: FailoverNode): Promise<{ standbys: string; commit: string }> {
    const [[standbys], [commit]] = await Promise.all([
      this.psql(node, "show synchronous_standby_names"),
      this.psql(node, "show synchronous_commit"),
    ]);
    return { standbys: standbys[0], commit: commit[0] };
  }

  /**
   * Stops everything this cluster started (keepers and every process under
   * them, then any postmaster left), removes the shared memory a killed
   * postmaster left, and deletes the directory. Safe to call twice.
   */
  async stop(): Promise<void> {
    const pids = new Set<number>();
    for (const k of this.#keepers) for (const p of processTree(k.child.pid)) pids.add(p);
    for (const n of [this.monitor, ...this.nodes]) {
      const pm = postmasterOf(n.pgdata);
      if (!pm) continue;
      if (pm.shmid !== undefined) this.#shmids.add(pm.shmid);
      for (const p of processTree(pm.pid)) pids.add(p);
    }
    kill([...pids]);
    await Promise.all(this.#keepers.map((k) => k.child.status));
    this.#keepers.length = 0;
    // Bounded: backends see their postmaster gone and exit within moments.
    for (let i = 0; i < 50 && [...pids].some(alive); i++) await sleep(100);
    for (const shmid of this.#shmids) {
      await new Deno.Command("ipcrm", { args: ["-m", String(shmid)], stdout: "null", stderr: "null" })
        .output()
        .catch(() => {});
    }
    this.#shmids.clear();
    await Deno.remove(this.dir, { recursive: true }).catch(() => {});
  }

  /** The environment pg_autoctl runs in: its config and state kept inside the cluster's directory. */
  #env(): Record<string, string> {
    return {
      PATH: `${PG_BIN}:/usr/bin:/bin`,
      HOME: this.dir,
      XDG_CONFIG_HOME: `${this.dir}/config`,
      XDG_DATA_HOME: `${this.dir}/share`,
      XDG_RUNTIME_DIR: `${this.dir}/run`,
      PG_CONFIG: `${PG_BIN}/pg_config`,
      LANG: "C.UTF-8",
    };
  }

  #command(args: string[], log: string, opts: { stdin?: "null" } = {}): Deno.Command {
    // setpriv execs (no fork): the pid we get is pg_autoctl's own, so killing it and its tree is exact.
    return new Deno.Command("setpriv", {
      args: [
        `--reuid=${OS_USER}`,
        `--regid=${OS_USER}`,
        "--init-groups",
        "--",
        "/bin/sh",
        "-c",
        `exec "$0" "$@" >>"${this.dir}/${log}.log" 2>&1`,
        PG_AUTOCTL,
        ...args,
      ],
      cwd: this.dir,
      clearEnv: true,
      env: this.#env(),
      stdin: opts.stdin ?? "null",
      stdout: "null",
      stderr: "null",
    });
  }

  async #autoctl(args: string[], log: string): Promise<void> {
    const { code } = await this.#command(args, log).output();
    if (code !== 0) {
      const text = await Deno.readTextFile(`${this.dir}/${log}.log`).catch(() => "");
      throw new Error(`pg_autoctl ${args.slice(0, 2).join(" ")} exited ${code}:\n${text.slice(-2000)}`);
    }
  }

  #keep(node: FailoverNode, args: string[]): void {
    this.#keepers.push({ node, child: this.#command(args, node.name).spawn() });
  }

  async #waitReady(node: FailoverNode, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    // Bounded by the deadline.
    while (Date.now() < deadline) {
      if (await this.psql(node, "select 1").then(() => true, () => false)) return;
      await sleep(200);
    }
    throw new Error(`${node.name} did not accept connections within ${timeoutMs} ms`);
  }
}

async function chown(path: string): Promise<void> {
  const { code } = await new Deno.Command("chown", { args: [`${OS_USER}:${OS_USER}`, path] }).output();
  if (code !== 0) throw new Error(`chown ${OS_USER} ${path} failed`);
}

function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return !/^\d+ \(.*\) Z/.test(stat);
  } catch {
    return false;
  }
}
