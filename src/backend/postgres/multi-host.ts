/**
 * Multi-host connection strings, as libpq reads them:
 * `postgres://user@primary:5432,standby:5432/db?target_session_attrs=read-write`.
 *
 * node-postgres connects to one host only, so a failover (the primary gone, a standby promoted)
 * would leave every new connection knocking on the dead host. Here each new connection tries the
 * hosts in turn, the one that last worked first, and with `target_session_attrs=read-write` (or
 * `primary`) keeps only a server that accepts writes, as libpq does: a standby still in recovery,
 * or a server with `default_transaction_read_only`, is skipped. The pool replaces connections
 * that die, so after a failover the new ones reach the promoted server by themselves; the LISTEN
 * connection comes from the same pool and follows too.
 */
import pg from "pg";
import { InvalidInputError } from "../../core/errors.js";

export interface HostPort {
  host: string;
  port: number;
}

export interface MultiHostUrl {
  hosts: HostPort[];
  /** The connection string for one host, everything else (user, database, parameters) kept. */
  urlFor(host: HostPort): string;
  /** `any` (the default), or a server that accepts writes (`read-write`, `primary`). */
  targetSessionAttrs: "any" | "read-write";
}

/** Null unless `url` lists more than one host or asks for `target_session_attrs`. */
export function parseMultiHostUrl(url: string): MultiHostUrl | null {
  const match = /^(postgres(?:ql)?:\/\/)([^@/?#]*@)?([^/?#]*)(.*)$/i.exec(url);
  if (!match) return null;
  const [, scheme, credentials = "", hostList, rest] = match;
  const query = rest!.indexOf("?");
  const params = new URLSearchParams(query < 0 ? "" : rest!.slice(query + 1));
  const attrs = params.get("target_session_attrs");
  const entries = hostList!.split(",");
  if (entries.length < 2 && attrs === null) return null;
  let targetSessionAttrs: MultiHostUrl["targetSessionAttrs"];
  if (attrs === null || attrs === "any") targetSessionAttrs = "any";
  else if (attrs === "read-write" || attrs === "primary") targetSessionAttrs = "read-write";
  else {
    throw new InvalidInputError(`target_session_attrs=${attrs} is not supported; use read-write (or primary: a server that accepts writes) or any`);
  }
  params.delete("target_session_attrs");
  const hosts = entries.map((entry) => {
    const m = /^(\[[^\]]+\]|[^:]*)(?::(\d+))?$/.exec(entry);
    if (!m || m[1] === "") throw new InvalidInputError(`cannot read host:port ${JSON.stringify(entry)} in the PostgreSQL URL`);
    return { host: m[1]!, port: m[2] ? Number(m[2]) : 5432 };
  });
  const path = query < 0 ? rest! : rest!.slice(0, query);
  const search = params.toString();
  return {
    hosts,
    targetSessionAttrs,
    urlFor: (h) => `${scheme}${credentials}${h.host}:${h.port}${path}${search ? `?${search}` : ""}`,
  };
}

/** `//host:port,host:port/database`, never the password. */
export function describeHosts(target: MultiHostUrl): string {
  const first = target.urlFor(target.hosts[0]!);
  let path = "";
  try {
    path = new URL(first).pathname;
  } catch {
    // No database in it: the default.
  }
  return `//${target.hosts.map((h) => `${h.host}:${h.port}`).join(",")}${path}`;
}

interface ClientInternals {
  host: string;
  port: number;
  connectionParameters: { host: string; port: number };
}

/**
 * A pg.Client class for a pool over `target`'s hosts. Give the pool `connectionString:
 * target.urlFor(target.hosts[0])`; each connection then picks its host when it connects.
 */
export function multiHostClient(target: MultiHostUrl): typeof pg.Client {
  /** The host the last successful connection went to: tried first next time. */
  let preferred = 0;
  class MultiHostClient extends pg.Client {
    private readonly settings: pg.ClientConfig;

    constructor(config?: string | pg.ClientConfig) {
      super(config);
      this.settings = typeof config === "string" ? { connectionString: config } : (config ?? {});
    }

    override connect(): Promise<pg.Client>;
    override connect(callback: ((err: Error) => void) | ((err: null, c: pg.Client) => void)): void;
    override connect(callback?: ((err: Error) => void) | ((err: null, c: pg.Client) => void)): Promise<pg.Client> | void {
      const done = this.pickHost().then(() => super.connect());
      if (callback === undefined) return done;
      const settle = callback as (err: Error | null, c?: pg.Client) => void;
      done.then(
        (client) => settle(null, client),
        (error: unknown) => settle(error instanceof Error ? error : new Error(String(error))),
      );
    }

    /**
     * Points this client at the first host, from the preferred one on, that answers (and
     * accepts writes when asked): a short probe connection per host tried.
     */
    private async pickHost(): Promise<void> {
      const failures: string[] = [];
      const n = target.hosts.length;
      for (let i = 0; i < n; i++) {
        const index = (preferred + i) % n;
        const host = target.hosts[index]!;
        if (n > 1 || target.targetSessionAttrs !== "any") {
          const why = await probe(this.settings, target, host);
          if (why !== null) {
            failures.push(`${host.host}:${host.port}: ${why}`);
            continue;
          }
        }
        preferred = index;
        const self = this as unknown as ClientInternals;
        self.host = host.host;
        self.port = host.port;
        self.connectionParameters.host = host.host;
        self.connectionParameters.port = host.port;
        return;
      }
      throw new Error(`no PostgreSQL host${target.targetSessionAttrs === "read-write" ? " accepting writes" : ""} among ${n}: ${failures.join("; ")}`);
    }
  }
  return MultiHostClient;
}

/** Null when `host` answers (and accepts writes when asked), else why not. */
async function probe(settings: pg.ClientConfig, target: MultiHostUrl, host: HostPort): Promise<string | null> {
  const client = new pg.Client({
    ...settings,
    connectionString: target.urlFor(host),
    // A host that does not answer must not hold up the ones after it for the pool's full timeout.
    connectionTimeoutMillis: Math.min(settings.connectionTimeoutMillis ?? 5_000, 5_000),
  });
  client.on("error", () => undefined);
  try {
    await client.connect();
    if (target.targetSessionAttrs === "read-write") {
      // What libpq asks: a standby in recovery reports on, and so does a server set read-only.
      const r = await client.query<{ transaction_read_only: string }>("SHOW transaction_read_only");
      if (r.rows[0]?.transaction_read_only !== "off") return "read-only (a standby, or default_transaction_read_only)";
    }
    return null;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  } finally {
    await client.end().catch(() => undefined);
  }
}
