/**
 * URLs that carry secrets: a database URL that may name several hosts (a
 * primary and its standbys), and the forms a password takes in one, so logs
 * and errors show a URL without it. Read by the settings, the PostgreSQL
 * driver and the model endpoint alike.
 *
 * @module
 */

/** A URL parsed by {@link parseHostsUrl}: as WHATWG parses it with the first host, and every host as written. */
export interface HostsUrl {
  /** The URL with the first of its hosts in place of the list. */
  url: URL;
  /** `host[:port]` of each host, in the order written; one entry for a plain URL. */
  hosts: string[];
  /** The URL as a string again, with the full host list in place of the first host. */
  format(url: URL): string;
}

/**
 * Parses a URL whose authority may name several hosts, the form libpq and
 * postgres.js take for a primary and its standbys
 * (`postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write`), which
 * `new URL` refuses. Each host must parse on its own (a name or address, an
 * optional numeric port). Throws a TypeError for a URL that does not parse.
 */
export function parseHostsUrl(raw: string): HostsUrl {
  const m = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)(.*)$/is.exec(raw);
  const at = m ? m[2].lastIndexOf("@") : -1;
  const list = m ? m[2].slice(at + 1) : "";
  if (!m || !list.includes(",")) {
    const url = new URL(raw);
    return { url, hosts: [url.host], format: (u) => u.toString() };
  }
  const [scheme, authority, rest] = [m[1], m[2], m[3]];
  const hosts = list.split(",");
  for (const host of hosts) {
    const one = new URL(`${scheme}${host}/`);
    if (one.hostname === "" || one.pathname !== "/") throw new TypeError(`Invalid host in URL: '${host}'`);
  }
  const url = new URL(`${scheme}${authority.slice(0, at + 1)}${hosts[0]}${rest}`);
  const format = (u: URL) => {
    const s = u.toString();
    const start = s.indexOf("//") + 2;
    const end = s.indexOf("/", start) < 0 ? s.length : s.indexOf("/", start);
    const userinfo = s.slice(start, end).lastIndexOf("@") + 1;
    return s.slice(0, start + userinfo) + hosts.join(",") + s.slice(end);
  };
  return { url, hosts, format };
}

/** Hides the password of a URL-shaped string (also when the URL does not parse). */
export function redactUrl(raw: string): string {
  try {
    const { url: u, format } = parseHostsUrl(raw);
    if (u.password) u.password = "***";
    for (const key of [...u.searchParams.keys()]) {
      if (/^(password|passwd|pass|sslpassword|api[_-]?key|token)$/i.test(key)) u.searchParams.set(key, "***");
    }
    return format(u).replaceAll("%2A%2A%2A", "***");
  } catch {
    // Up to the last '@': a password may itself hold '@' or ':' when the URL is malformed.
    return raw.replace(/(\/\/[^:/@]*:).*@/, "$1***@")
      .replace(/([?&](?:password|passwd|pass|sslpassword|api[_-]?key|token)=)[^&#]*/gi, "$1***");
  }
}

/** The password inside a database URL, if any (to mask it in logs). */
export function urlPassword(raw: string | undefined): string | undefined {
  if (!raw) return undefined;
  try {
    const p = parseHostsUrl(raw).url.password;
    return p ? decodeURIComponent(p) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Every form in which the password of a database URL may show up: as written
 * (percent-encoded) and decoded. Masking both keeps `p%40ss` and `p@ss` out of logs.
 */
export function urlPasswordForms(raw: string | undefined): string[] {
  if (!raw) return [];
  try {
    const u = parseHostsUrl(raw).url;
    const forms: string[] = [];
    const add = (written: string) => {
      if (!written) return;
      forms.push(written);
      try {
        const decoded = decodeURIComponent(written);
        if (decoded !== written) forms.push(decoded);
      } catch {
        // a malformed escape: the written form is all there is
      }
    };
    add(u.password);
    const query = /[?&](?:password|sslpassword)=([^&#]*)/i.exec(raw);
    if (query) add(query[1]);
    return forms;
  } catch {
    return [];
  }
}
