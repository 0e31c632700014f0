/**
 * Test "hosts" on one machine: each host is a Linux network namespace with
 * an address of its own, joined to the root namespace by a veth pair whose
 * root end is a port of a bridge the harness makes. The bridge holds the
 * root side's address (`.1` of a private /24), where the database and the
 * mocks listen, so every byte a host sends them crosses its own virtual
 * link, and cutting that link cuts the host off.
 *
 * Everything carries the creating process's pid in its name (`arh<pid>...`):
 * {@link removeStaleHosts} deletes what a killed earlier run left behind
 * (its pid no longer alive), never what a live process made (another copy of
 * the suite running beside this one), and {@link HostNetwork.close} deletes
 * what this run made, pass or fail. Picking a /24 and removing stale hosts
 * happen under a file lock ({@link HOSTS_LOCK}), so two processes making
 * networks at once never pick the same one. Needs root and the `ip` command
 * ({@link hostsSkipReason}).
 *
 * @module
 */

import { alive, Proc } from "./procs.ts";

/** Names start with this, then the owner's pid: `arh1234-0` (a namespace), `arh1234b` (the bridge). */
export const HOSTS_PREFIX = "arh";
/** The /16 the harness takes its /24s from: 10.213.N.0/24. */
const NET16 = "10.213";
/**
 * The file locked (`flock`) while a network looks for a free /24 until its
 * bridge holds an address on it, and while stale hosts are removed: without
 * it, two processes making networks at once both see the same /24 free and
 * both take it, and two removing the same stale namespace trip over each
 * other. The kernel lets go of the lock when its holder dies, so a killed run
 * never leaves it held; the file itself stays (removing a lock file others
 * may be waiting on would let two holders in). In `/tmp`, not `TMPDIR`: the
 * addresses are the machine's, so the lock must be one for every process.
 */
export const HOSTS_LOCK = "/tmp/agent-runtime-hosts.lock";

/** Why the host tests cannot run here (not root, no `ip`), or undefined when they can. */
export function hostsSkipReason(): string | undefined {
  if (Deno.build.os !== "linux") return `network namespaces are Linux's; this is ${Deno.build.os}`;
  if (Deno.uid() !== 0) return `network namespaces need root; uid is ${Deno.uid()}`;
  const ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].find(isFile);
  if (!ip) return "the `ip` command (iproute2) is missing";
  return undefined;
}

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** Runs `ip ARGS`; throws with its stderr when it fails. */
export async function ip(...args: string[]): Promise<string> {
  const out = await new Deno.Command("ip", { args, stdout: "piped", stderr: "piped" }).output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  if (!out.success) throw new Error(`ip ${args.join(" ")} failed (${out.code}): ${text(out.stderr).trim()}`);
  return text(out.stdout);
}

/** The pid in one of our names, or undefined for a name that is not ours. */
function ownerPid(name: string): number | undefined {
  const m = new RegExp(`^${HOSTS_PREFIX}(\\d+)`).exec(name);
  return m ? Number(m[1]) : undefined;
}

/** Namespaces whose names are ours. */
async function ourNamespaces(): Promise<string[]> {
  const out = await ip("netns", "list");
  return out.split("\n").map((l) => l.split(" ")[0]).filter((n) => ownerPid(n) !== undefined);
}

/** Links in the root namespace whose names are ours (`ip -o link` prints `3: name@peer: ...`). */
async function ourLinks(): Promise<string[]> {
  const out = await ip("-o", "link", "show");
  return out.split("\n").map((l) => l.split(":")[1]?.trim().split("@")[0] ?? "")
    .filter((n) => ownerPid(n) !== undefined);
}

/**
 * Deletes the namespaces and links an earlier run left behind (their owner
 * pid is gone), killing whatever still runs in those namespaces, holding
 * {@link HOSTS_LOCK}. Returns what it removed.
 */
export function removeStaleHosts(): Promise<string[]> {
  return underHostsLock(removeStale);
}

/**
 * Runs `fn` holding {@link HOSTS_LOCK}. Not reentrant: a second open of the
 * file is a lock of its own, so `fn` must not call this again.
 */
async function underHostsLock<T>(fn: () => Promise<T>): Promise<T> {
  const lock = await Deno.open(HOSTS_LOCK, { create: true, write: true });
  try {
    await lock.lock(true);
    return await fn();
  } finally {
    // Closing the file lets go of the lock.
    lock.close();
  }
}

/** {@link removeStaleHosts}, for a caller that holds the lock. */
async function removeStale(): Promise<string[]> {
  const removed: string[] = [];
  for (const ns of await ourNamespaces()) {
    if (alive(ownerPid(ns)!)) continue;
    for (const pid of await namespacePids(ns)) killQuietly(pid, "SIGKILL");
    await ip("netns", "del", ns);
    removed.push(`netns ${ns}`);
  }
  for (const link of await ourLinks()) {
    if (alive(ownerPid(link)!)) continue;
    // A veth's peer goes with it: the second delete of a pair finds nothing.
    await ip("link", "del", link).catch(() => {});
    removed.push(`link ${link}`);
  }
  return removed;
}

/** The pids of every process in namespace `ns`. */
export async function namespacePids(ns: string): Promise<number[]> {
  const out = await ip("netns", "pids", ns);
  return out.split("\n").filter((l) => /^\d+$/.test(l.trim())).map(Number);
}

function killQuietly(pid: number, signal: Deno.Signal): void {
  try {
    Deno.kill(pid, signal);
  } catch (err) {
    // Gone between the listing and the signal.
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
}

/** One test host: a namespace, its address, and the root end of its link. */
export interface Host {
  /** Its position among the network's hosts, from 0. */
  readonly index: number;
  /** The namespace's name, also what `ip netns exec` takes. */
  readonly netns: string;
  /** Its address on the test subnet. */
  readonly address: string;
  /** The root namespace's end of its veth pair (a bridge port): what a cut sets down. */
  readonly rootLink: string;
}

/** Options of {@link HostNetwork.create}. */
export interface HostNetworkOptions {
  /** How many hosts; 1 to 200. */
  hosts: number;
}

/** Several hosts as network namespaces on one bridge; see the module doc. */
export class HostNetwork {
  /** The hosts, in order. */
  readonly hosts: readonly Host[];
  /** The bridge in the root namespace. */
  readonly bridge: string;
  /** The root namespace's address on the bridge: where the database and the mocks listen. */
  readonly rootAddress: string;
  /** The test subnet, `10.213.N.0/24`. */
  readonly subnet: string;
  #closed = false;

  private constructor(hosts: Host[], bridge: string, rootAddress: string, subnet: string) {
    this.hosts = hosts;
    this.bridge = bridge;
    this.rootAddress = rootAddress;
    this.subnet = subnet;
  }

  /**
   * Removes stale hosts, then makes a bridge on a /24 no interface uses and
   * `hosts` namespaces on it, each with loopback up and an address of its
   * own. Whatever was made is removed again if a later step fails.
   */
  static async create(opts: HostNetworkOptions): Promise<HostNetwork> {
    if (!Number.isInteger(opts.hosts) || opts.hosts < 1 || opts.hosts > 200) {
      throw new RangeError(
        `Cannot make hosts as 'hosts' must be an integer from 1 to 200: current value is ${opts.hosts}`,
      );
    }
    const reason = hostsSkipReason();
    if (reason) throw new Error(`Cannot make hosts: ${reason}`);
    const net = await HostNetwork.#bridged(opts.hosts);
    const tag = `${HOSTS_PREFIX}${Deno.pid}`;
    try {
      for (const h of net.hosts) {
        const inner = `${tag}i${h.index}`;
        await ip("netns", "add", h.netns);
        await ip("link", "add", h.rootLink, "type", "veth", "peer", "name", inner);
        await ip("link", "set", inner, "netns", h.netns);
        await ip("link", "set", h.rootLink, "master", net.bridge, "up");
        await ip("-n", h.netns, "link", "set", "lo", "up");
        await ip("-n", h.netns, "addr", "add", `${h.address}/24`, "dev", inner);
        await ip("-n", h.netns, "link", "set", inner, "up");
      }
    } catch (err) {
      await net.close();
      throw err;
    }
    return net;
  }

  /**
   * Under {@link HOSTS_LOCK}: removes stale hosts, picks a /24 no interface
   * uses and makes the bridge with its `.1` on it, so the next process to
   * look sees the /24 taken. The hosts are named, not yet made.
   */
  static #bridged(count: number): Promise<HostNetwork> {
    return underHostsLock(async () => {
      await removeStale();
      const used = await ip("-4", "-o", "addr", "show");
      const free = Array.from({ length: 250 }, (_, i) => i + 1)
        .find((n) => !used.includes(` ${NET16}.${n}.`));
      if (free === undefined) throw new Error(`Cannot make hosts: every ${NET16}.N.0/24 is in use`);
      const base = `${NET16}.${free}`;
      const tag = `${HOSTS_PREFIX}${Deno.pid}`;
      const hosts: Host[] = Array.from({ length: count }, (_, i) => ({
        index: i,
        netns: `${tag}-${i}`,
        address: `${base}.${10 + i}`,
        rootLink: `${tag}v${i}`,
      }));
      const net = new HostNetwork(hosts, `${tag}b`, `${base}.1`, `${base}.0/24`);
      try {
        await ip("link", "add", net.bridge, "type", "bridge");
        await ip("addr", "add", `${net.rootAddress}/24`, "dev", net.bridge);
        await ip("link", "set", net.bridge, "up");
      } catch (err) {
        await net.close();
        throw err;
      }
      return net;
    });
  }

  /** Cuts `host` off: the root end of its link goes down, so nothing it sends arrives (nor is answered). */
  async cut(host: Host): Promise<void> {
    await ip("link", "set", host.rootLink, "down");
  }

  /** Puts `host`'s link back up; connections held across the cut carry on. */
  async restore(host: Host): Promise<void> {
    await ip("link", "set", host.rootLink, "up");
  }

  /** The pids of every process running in `host`. */
  pids(host: Host): Promise<number[]> {
    return namespacePids(host.netns);
  }

  /** Sends `signal` to every process of `host` (listed first, then signalled together); returns the pids. */
  async signalAll(host: Host, signal: Deno.Signal): Promise<number[]> {
    const pids = await this.pids(host);
    for (const pid of pids) killQuietly(pid, signal);
    return pids;
  }

  /**
   * Starts `deno run -A <script> [args]` inside `host` (`ip netns exec`),
   * with the environment {@link Proc} gives a child plus `env`.
   */
  spawn(host: Host, script: string, env: Record<string, string>, args: string[] = []): Proc {
    return new Proc(script, env, { args, prefix: ["ip", "netns", "exec", host.netns] });
  }

  /**
   * Kills every process left in the hosts (waking frozen ones so the kill
   * lands), then deletes the namespaces and the bridge. Safe to call twice.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const errors: unknown[] = [];
    const names = new Set(await ourNamespaces());
    for (const h of this.hosts.filter((h) => names.has(h.netns))) {
      for (const pid of await namespacePids(h.netns).catch(() => [])) {
        killQuietly(pid, "SIGKILL");
        killQuietly(pid, "SIGCONT");
      }
    }
    // The root ends first (each takes its peer with it), then the namespaces, then the bridge.
    const links = new Set(await ourLinks());
    for (const h of this.hosts.filter((h) => links.has(h.rootLink))) {
      await ip("link", "del", h.rootLink).catch((err) => errors.push(err));
    }
    for (const h of this.hosts.filter((h) => names.has(h.netns))) {
      await ip("netns", "del", h.netns).catch((err) => errors.push(err));
    }
    if (links.has(this.bridge)) await ip("link", "del", this.bridge).catch((err) => errors.push(err));
    if (errors.length > 0) throw new AggregateError(errors, "Could not remove every test host");
  }
}
