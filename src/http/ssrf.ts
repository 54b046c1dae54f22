/**
 * Server-side request forgery guard for webhook deliveries.
 *
 * A callback URL is chosen by whoever enqueues a job, so without a guard anyone with the
 * `enqueue` scope could make the server POST to its own admin ports, the cloud metadata service
 * (169.254.169.254) or the internal network. The guard:
 *
 * - resolves the host and refuses it when ANY of its addresses is loopback, private (10/8,
 *   172.16/12, 192.168/16), link-local (169.254/16, fe80::/10), CGNAT (100.64/10), unique-local
 *   (fc00::/7), unspecified (0.0.0.0, ::), multicast, reserved or documentation space, an
 *   IPv4-mapped IPv6 address (::ffff:a.b.c.d) or an IPv6 form that embeds IPv4 (NAT64, 6to4,
 *   Teredo) — unless the host or the address is allow-listed;
 * - pins the connection to the address it checked (a custom `lookup`), so a DNS answer that
 *   changes between the check and the connect (DNS rebinding) cannot redirect it;
 * - never follows redirects (a 3xx is a failed delivery);
 * - sends plain `http:` only to allow-listed targets unless `allowHttp` is set.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { request as httpsRequest } from "node:https";
import { BlockList, isIP, type LookupFunction } from "node:net";
import { InvalidInputError } from "../core/errors.js";

/** A target refused by the guard. Deliveries to it are not retried. */
export class SsrfError extends InvalidInputError {
  override name = "SsrfError";
}

const DENIED: Array<[string, number, "ipv4" | "ipv6", string]> = [
  ["0.0.0.0", 8, "ipv4", "unspecified (0.0.0.0/8)"],
  ["10.0.0.0", 8, "ipv4", "private (10.0.0.0/8)"],
  ["100.64.0.0", 10, "ipv4", "carrier-grade NAT (100.64.0.0/10)"],
  ["127.0.0.0", 8, "ipv4", "loopback (127.0.0.0/8)"],
  ["169.254.0.0", 16, "ipv4", "link-local (169.254.0.0/16)"],
  ["172.16.0.0", 12, "ipv4", "private (172.16.0.0/12)"],
  ["192.0.0.0", 24, "ipv4", "IETF protocol assignments (192.0.0.0/24)"],
  ["192.0.2.0", 24, "ipv4", "documentation (192.0.2.0/24)"],
  ["192.88.99.0", 24, "ipv4", "6to4 relay (192.88.99.0/24)"],
  ["192.168.0.0", 16, "ipv4", "private (192.168.0.0/16)"],
  ["198.18.0.0", 15, "ipv4", "benchmarking (198.18.0.0/15)"],
  ["198.51.100.0", 24, "ipv4", "documentation (198.51.100.0/24)"],
  ["203.0.113.0", 24, "ipv4", "documentation (203.0.113.0/24)"],
  ["224.0.0.0", 4, "ipv4", "multicast (224.0.0.0/4)"],
  ["240.0.0.0", 4, "ipv4", "reserved (240.0.0.0/4)"],
  ["::", 128, "ipv6", "unspecified (::)"],
  ["::1", 128, "ipv6", "loopback (::1)"],
  ["::ffff:0:0", 96, "ipv6", "IPv4-mapped IPv6 (::ffff:0:0/96)"],
  ["::", 96, "ipv6", "IPv4-compatible IPv6 (::/96)"],
  ["64:ff9b::", 96, "ipv6", "NAT64 (64:ff9b::/96)"],
  ["64:ff9b:1::", 48, "ipv6", "local NAT64 (64:ff9b:1::/48)"],
  ["100::", 64, "ipv6", "discard-only (100::/64)"],
  ["2001::", 32, "ipv6", "Teredo (2001::/32)"],
  ["2001:db8::", 32, "ipv6", "documentation (2001:db8::/32)"],
  ["2002::", 16, "ipv6", "6to4 (2002::/16)"],
  ["fc00::", 7, "ipv6", "unique-local (fc00::/7)"],
  ["fe80::", 10, "ipv6", "link-local (fe80::/10)"],
  ["fec0::", 10, "ipv6", "site-local (fec0::/10)"],
  ["ff00::", 8, "ipv6", "multicast (ff00::/8)"],
];

const DENY_LISTS = DENIED.map(([net, prefix, type, label]) => {
  const list = new BlockList();
  list.addSubnet(net, prefix, type);
  return { list, type, label };
});

/** Why an address may not be a webhook target, or null when it is public. */
export function deniedReason(address: string): string | null {
  const family = isIP(address);
  if (family === 0) return "not an IP address";
  const type = family === 4 ? "ipv4" : "ipv6";
  for (const rule of DENY_LISTS) {
    // BlockList relates IPv4 and IPv4-mapped IPv6 across families (an IPv6 rule such as
    // ::ffff:0:0/96 would match every IPv4 address): compare within one family only. The
    // explicit ::ffff:0:0/96 rule refuses every mapped address, whatever it maps to.
    if (rule.type === type && rule.list.check(address, type)) return rule.label;
  }
  return null;
}

/** Host names and IP ranges that bypass the guard (internal receivers you trust). */
export interface SsrfPolicy {
  /**
   * Allowed despite the rules: host names (exact, case-insensitive, e.g. "hooks.internal"),
   * IP addresses ("127.0.0.1", "::1") and CIDR ranges ("10.1.0.0/16"). Default none.
   */
  allow?: readonly string[];
  /** Send to `http:` URLs that are not allow-listed. Default false: public targets need https. */
  allowHttp?: boolean;
}

export class SsrfGuard {
  private readonly hosts = new Set<string>();
  private readonly ranges = new BlockList();
  private hasRanges = false;
  private readonly allowHttp: boolean;

  constructor(policy: SsrfPolicy = {}) {
    this.allowHttp = policy.allowHttp ?? false;
    for (const entry of policy.allow ?? []) {
      const e = entry.trim();
      const cidr = /^(.+)\/(\d{1,3})$/.exec(e);
      const ip = cidr ? cidr[1]! : e.replace(/^\[|\]$/g, "");
      const family = isIP(ip);
      if (family !== 0) {
        const prefix = cidr ? Number(cidr[2]) : family === 4 ? 32 : 128;
        if (prefix > (family === 4 ? 32 : 128)) throw new InvalidInputError(`webhook allow-list entry "${entry}": prefix /${prefix} is too long`);
        this.ranges.addSubnet(ip, prefix, family === 4 ? "ipv4" : "ipv6");
        this.hasRanges = true;
      } else if (/^[A-Za-z0-9.-]+$/.test(e) && !cidr) {
        this.hosts.add(e.toLowerCase().replace(/\.$/, ""));
      } else {
        throw new InvalidInputError(`webhook allow-list entry "${entry}" is not a host name, an IP address or a CIDR range`);
      }
    }
  }

  private addressAllowed(address: string): boolean {
    if (!this.hasRanges) return false;
    return this.ranges.check(address, isIP(address) === 4 ? "ipv4" : "ipv6");
  }

  /**
   * Checks a URL without network access: scheme, credentials, and literal IP hosts. Returns the
   * parsed URL; throws SsrfError saying what is wrong.
   */
  checkUrl(raw: string): URL {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new SsrfError(`callback URL ${JSON.stringify(raw.slice(0, 200))} is not an absolute URL`);
    }
    if (url.protocol !== "https:" && url.protocol !== "http:") {
      throw new SsrfError(`callback URL must use https (or http to an allow-listed host); got ${url.protocol}`);
    }
    if (url.username || url.password) throw new SsrfError("callback URL must not contain credentials; authenticate the receiver with the webhook signature");
    const host = hostOf(url);
    const hostAllowed = this.hosts.has(host);
    if (isIP(host) !== 0) {
      const allowed = hostAllowed || this.addressAllowed(host);
      const reason = allowed ? null : deniedReason(host);
      if (reason) throw new SsrfError(`callback URL host ${host} is ${reason}; such targets are refused unless allow-listed`);
      if (url.protocol === "http:" && !allowed && !this.allowHttp) throw new SsrfError("callback URL must use https (plain http only to allow-listed hosts)");
    } else {
      if (host === "localhost" || host.endsWith(".localhost")) {
        if (!hostAllowed) throw new SsrfError(`callback URL host ${host} is loopback; such targets are refused unless allow-listed`);
      }
      if (url.protocol === "http:" && !hostAllowed && !this.allowHttp)
        throw new SsrfError("callback URL must use https (plain http only to allow-listed hosts)");
    }
    return url;
  }

  /**
   * Resolves the URL's host and checks every address; returns the address to connect to.
   * Throws SsrfError when the target is refused.
   */
  async resolve(url: URL): Promise<{ address: string; family: 4 | 6 }> {
    const host = hostOf(url);
    const literal = isIP(host);
    if (literal !== 0) return { address: host, family: literal as 4 | 6 };
    let addresses: Array<{ address: string; family: number }>;
    try {
      addresses = await dnsLookup(host, { all: true, verbatim: true });
    } catch (error) {
      throw Object.assign(new Error(`cannot resolve ${host}: ${(error as Error).message}`), { cause: error });
    }
    if (addresses.length === 0) throw new Error(`cannot resolve ${host}: no addresses`);
    const hostAllowed = this.hosts.has(host);
    for (const a of addresses) {
      if (hostAllowed || this.addressAllowed(a.address)) continue;
      const reason = deniedReason(a.address);
      if (reason) throw new SsrfError(`callback host ${host} resolves to ${a.address}, which is ${reason}; refused unless allow-listed`);
    }
    const first = addresses[0]!;
    return { address: first.address, family: first.family === 6 ? 6 : 4 };
  }
}

function hostOf(url: URL): string {
  return url.hostname
    .replace(/^\[|\]$/g, "")
    .toLowerCase()
    .replace(/\.$/, "");
}

export interface PostResult {
  status: number;
  headers: IncomingHttpHeaders;
  /** The first bytes of the response body, for the delivery's error message. */
  bodySnippet: string;
}

const SNIPPET_BYTES = 512;

/**
 * POSTs `body` to `url` through the guard: resolved and checked first, connected to exactly the
 * checked address, redirects not followed. Resolves with the status whatever it is.
 */
export async function guardedPost(
  guard: SsrfGuard,
  rawUrl: string,
  body: string,
  headers: Record<string, string>,
  options: { timeoutMs: number; signal?: AbortSignal },
): Promise<PostResult> {
  const url = guard.checkUrl(rawUrl);
  const pinned = await guard.resolve(url);
  const lookup: LookupFunction = (_hostname, opts, callback) => {
    // Node asks for every address when it may race IPv4 and IPv6 (autoSelectFamily).
    if ((opts as { all?: boolean }).all) {
      (callback as unknown as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [pinned]);
    } else {
      callback(null, pinned.address, pinned.family);
    }
  };
  const signal = options.signal ? AbortSignal.any([options.signal, AbortSignal.timeout(options.timeoutMs)]) : AbortSignal.timeout(options.timeoutMs);
  const send = url.protocol === "https:" ? httpsRequest : httpRequest;
  return new Promise<PostResult>((resolve, reject) => {
    const req = send(
      url,
      {
        method: "POST",
        headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
        lookup,
        // A fresh connection per delivery: a pooled socket could have been opened for another
        // address by a request this guard did not check.
        agent: false,
        signal,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          if (size < SNIPPET_BYTES) chunks.push(chunk);
          size += chunk.length;
          // Receivers should answer quickly and briefly; do not download a large body.
          if (size > 64 * 1024) res.destroy();
        });
        const finish = () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            bodySnippet: Buffer.concat(chunks).subarray(0, SNIPPET_BYTES).toString("utf8"),
          });
        res.on("end", finish);
        res.on("close", finish);
        res.on("error", finish);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}
