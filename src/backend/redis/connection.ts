/**
 * The backend's Redis connections: the options of the ones it opens itself, and the guard that
 * makes every command either answer or fail when its connection drops, never hang.
 */
import { Redis, type Cluster, type RedisOptions } from "ioredis";
import { ConveyorError } from "../../core/errors.js";

/** A connection as the backend uses it: a single server or a cluster. */
export type Client = Redis | Cluster;

/** What RedisBackend accepts as `connection`. */
export type ConnectionOption = string | RedisOptions | Client;

/** Options of the connections the backend opens itself. */
export function ownConnectionOptions(prefix: string): RedisOptions {
  return {
    // Shows in CLIENT LIST, so operators can tell Conveyor's connections apart.
    connectionName: `${prefix}-conveyor`,
    // A command whose reply was lost with its connection may or may not have run; sending it
    // again could run a claim or an enqueue twice. It fails instead (see InFlight), and the
    // caller decides: the worker retries settles, which are fenced, and polls for claims.
    autoResendUnfulfilledCommands: false,
  };
}

/** Opens a connection for `connection` unless it already is one; `owned` says who closes it. */
export function connect(connection: ConnectionOption, prefix: string): { client: Client; owned: boolean } {
  if (isClient(connection)) return { client: connection, owned: false };
  const options = ownConnectionOptions(prefix);
  const client = typeof connection === "string" ? new Redis(connection, options) : new Redis({ ...options, ...connection });
  return { client, owned: true };
}

/**
 * A connected ioredis client rather than options. Duck-typed: a client from another copy of
 * ioredis (an application's own dependency) fails `instanceof` but works all the same.
 */
export function isClient(value: ConnectionOption): value is Client {
  return typeof value === "object" && value !== null && typeof (value as Partial<Redis>).duplicate === "function";
}

export function isCluster(client: Client): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}

/** Closes a connection, waiting for replies still due, without waiting on one that is down. */
export async function quit(client: Client): Promise<void> {
  // On a connection that is down QUIT would wait in the offline queue for a reconnect that may
  // never come.
  if (client.status !== "ready") {
    client.disconnect();
    return;
  }
  try {
    await client.quit();
  } catch {
    // The server went away meanwhile: nothing left to release.
    client.disconnect();
  }
}

/** A label for logs: scheme, host, port and db, never the password. */
export function describe(connection: ConnectionOption): string {
  if (typeof connection === "string") {
    try {
      const url = new URL(connection);
      return `${url.protocol}//${url.host}${url.pathname === "/" ? "" : url.pathname}`;
    } catch {
      return "redis (unparsable URL)";
    }
  }
  if (isClient(connection) && isCluster(connection)) {
    const nodes = connection.nodes("master").map((node) => `${node.options.host ?? "localhost"}:${node.options.port ?? 6379}`);
    return `redis-cluster://${nodes.join(",") || "(connecting)"}`;
  }
  const options: RedisOptions = isClient(connection) ? connection.options : connection;
  const scheme = options.tls ? "rediss" : "redis";
  return `${scheme}://${options.host ?? "localhost"}:${options.port ?? 6379}${options.db ? `/${options.db}` : ""}`;
}

/**
 * Fails the commands a dropped connection took with it.
 *
 * With `autoResendUnfulfilledCommands: false`, ioredis 5 forgets the commands that were sent but
 * unanswered when the connection closed, without settling their promises (redis/ioredis#2193,
 * fixed after 5.11): a worker awaiting such a claim would wait forever. Every command sent while
 * the connection is up is tracked here until it settles, and the connection's `close` rejects
 * the ones still waiting. Commands issued while it is down sit in ioredis' offline queue, are
 * sent after the reconnect, and are not touched.
 *
 * Only used where resending is off; a client that resends (ioredis' default, e.g. one passed in
 * by the application) settles its commands itself, after running them again.
 */
export class InFlight {
  private readonly waiting = new Set<(error: Error) => void>();
  private readonly tracking: boolean;

  constructor(private readonly client: Client) {
    this.tracking = !isCluster(client) && client.options.autoResendUnfulfilledCommands === false;
    if (this.tracking) client.on("close", this.onClose);
  }

  /** Sends a command (or a script call) through `send`, failing it if the connection drops first. */
  run<T>(send: () => Promise<T>): Promise<T> {
    if (!this.tracking || this.client.status !== "ready") return send();
    return new Promise<T>((resolve, reject) => {
      const fail = (error: Error) => reject(error);
      this.waiting.add(fail);
      void send()
        .then(resolve, reject)
        .finally(() => this.waiting.delete(fail));
    });
  }

  /** Stops watching the connection (it stays open). */
  detach(): void {
    if (this.tracking) this.client.off("close", this.onClose);
  }

  private readonly onClose = () => {
    if (this.waiting.size === 0) return;
    const error = new ConveyorError(
      "the connection to Redis dropped before it answered; the command may or may not have run " +
        "(fenced settles can simply be sent again; an unanswered claim's jobs return after their lease expires)",
    );
    const waiting = [...this.waiting];
    this.waiting.clear();
    for (const fail of waiting) fail(error);
  };
}
