/**
 * The backend's Redis connections: the options of the ones it opens itself, and the guard that
 * makes every command either answer or fail when its connection drops, never hang.
 */
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from "ioredis";
import { ConveyorError, InvalidInputError } from "../../core/errors.js";

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

/**
 * Opens a connection for `connection` unless it already is one; `owned` says who closes it.
 * `clientOptions` (RedisBackendOptions.clientOptions) go under Conveyor's own, and under
 * {@link FAIL_FAST}'s when `failFast` (RedisBackendOptions.failFast).
 */
export function connect(connection: ConnectionOption, prefix: string, clientOptions: RedisOptions = {}, failFast = false): { client: Client; owned: boolean } {
  if (isClient(connection)) return { client: connection, owned: false };
  const options = { ...clientOptions, ...(failFast ? FAIL_FAST.redis : {}), ...ownConnectionOptions(prefix) };
  const topology = typeof connection === "string" ? parseTopologyUrl(connection) : null;
  if (topology !== null) return { client: openTopology(topology, options, failFast ? FAIL_FAST.cluster : {}), owned: true };
  const client = typeof connection === "string" ? new Redis(connection, options) : new Redis({ ...options, ...connection });
  return { client, owned: true };
}

/**
 * failFast (RedisBackendOptions.failFast, for one call and done): how many times a connection
 * tries again after its first attempt failed before the calls waiting on it fail. One rule for
 * every topology; {@link FAIL_FAST} says it in the ioredis option of each.
 */
const FAIL_FAST_RETRIES = 1;

/** The wait before each of those retries, ms (ioredis' own first waits: 50 ms, a cluster 102 ms, the sentinels 10 ms). */
const FAIL_FAST_RETRY_DELAY_MS = 100;

/** An ioredis retry strategy that stops after {@link FAIL_FAST_RETRIES} retries (null: give up). */
function failFastRetry(times: number): number | null {
  return times <= FAIL_FAST_RETRIES ? FAIL_FAST_RETRY_DELAY_MS : null;
}

/**
 * failFast in ioredis' options, for what each topology waits on:
 * - a server (also the primary the sentinels named): a call fails after FAIL_FAST_RETRIES
 *   reconnects (`maxRetriesPerRequest`); the connection itself keeps reconnecting;
 * - the sentinels: once none of them named the primary FAIL_FAST_RETRIES + 1 times in a row, the
 *   connection ends and its calls fail with "All sentinels are unreachable"
 *   (`sentinelRetryStrategy`; {@link keepConnecting} connects it again 200 ms later);
 * - a cluster's startup nodes: once none of them answered FAIL_FAST_RETRIES + 1 times in a row,
 *   the cluster client ends for good and its calls fail with "None of startup nodes is
 *   available" (`clusterRetryStrategy`).
 * Without failFast all of them keep trying (ioredis' defaults): a long-lived process waits
 * through an outage.
 */
const FAIL_FAST: { redis: RedisOptions; cluster: Partial<ClusterOptions> } = {
  redis: { maxRetriesPerRequest: FAIL_FAST_RETRIES, sentinelRetryStrategy: failFastRetry },
  cluster: { clusterRetryStrategy: failFastRetry },
};

/** How ioredis says a cluster client gave up on its startup nodes (clusterRetryStrategy returned null). */
const CLUSTER_GAVE_UP = "None of startup nodes is available";
/** How ioredis says a Sentinel client gave up on the sentinels (sentinelRetryStrategy returned null). */
const SENTINELS_GAVE_UP = "All sentinels are unreachable";

/** The messages of the errors calls fail with when ioredis gives up connecting a cluster or through the sentinels. */
export const GAVE_UP_MESSAGES = [CLUSTER_GAVE_UP, SENTINELS_GAVE_UP];

/**
 * When `error` is ioredis giving up connecting (failFast, or limits of the caller's own
 * clientOptions): what could not be reached and what to do, for StoreUnavailableError's cause.
 * `lastConnectionError`: the message of the connection's last `error` event. Null for any other
 * error.
 */
export function gaveUpConnecting(error: unknown, lastConnectionError: string): string | null {
  if (!(error instanceof Error)) return null;
  if (error.name === "MaxRetriesPerRequestError") {
    return lastConnectionError === "" ? null : `${lastConnectionError}; check the URL and that Redis is running`;
  }
  if (error.message.startsWith(CLUSTER_GAVE_UP)) {
    return `none of the cluster's startup nodes answered${saying(lastConnectionError)}; check the URL and that the cluster's nodes are running`;
  }
  if (error.message.startsWith(SENTINELS_GAVE_UP)) {
    // ioredis names the last sentinel's error, if any sentinel failed rather than answered.
    const last = / Last error: (.*)$/.exec(error.message)?.[1];
    if (last === undefined) {
      return "the sentinels answered but none knows a primary by the name at the end of the URL; check that name";
    }
    return `no sentinel answered with the primary's address${saying(last)}; check the URL and that the sentinels are running`;
  }
  return null;
}

/**
 * `: <error>` to follow what failed, or nothing when ioredis said only "Connection is closed.":
 * what it fails a cluster node or a sentinel it cannot connect to with (the refusal itself is lost).
 */
function saying(error: string): string {
  const text = error.trim().replace(/\.$/, "");
  return text === "" || text === "Connection is closed" ? "" : `: ${text}`;
}

/** A Redis Cluster or a Sentinel-watched primary, as a URL names it (see {@link parseTopologyUrl}). */
export interface TopologyUrl {
  kind: "cluster" | "sentinel";
  /** Cluster seed nodes, or the sentinels. */
  nodes: Array<{ host: string; port: number }>;
  /** The primary's name at the sentinels (sentinel only). */
  masterName: string | null;
  username: string | undefined;
  password: string | undefined;
  tls: boolean;
}

const TOPOLOGY_SCHEMES: Record<string, { kind: "cluster" | "sentinel"; tls: boolean; defaultPort: number }> = {
  "redis-cluster": { kind: "cluster", tls: false, defaultPort: 6379 },
  "rediss-cluster": { kind: "cluster", tls: true, defaultPort: 6379 },
  "redis-sentinel": { kind: "sentinel", tls: false, defaultPort: 26379 },
  "rediss-sentinel": { kind: "sentinel", tls: true, defaultPort: 26379 },
};

/**
 * Reads `redis-cluster://[user:password@]host:port,host:port,…` (seed nodes of a Redis Cluster)
 * and `redis-sentinel://[user:password@]host:port,host:port,…/<master name>` (the sentinels
 * watching a primary; the credentials are the data nodes'); `rediss-…` for TLS. The query string
 * is not read here (the caller takes out its own parameters first). Null for any other scheme.
 */
export function parseTopologyUrl(url: string): TopologyUrl | null {
  const match = /^([a-z-]+):\/\/(?:([^@/]*)@)?([^/?#]*)(?:\/([^?#]*))?/i.exec(url);
  const scheme = match ? TOPOLOGY_SCHEMES[match[1]!.toLowerCase()] : undefined;
  if (!match || !scheme) return null;
  const [, , credentials, hostList, path] = match;
  const nodes = hostList!
    .split(",")
    .filter((h) => h !== "")
    .map((entry) => {
      const hostPort = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(entry);
      if (!hostPort) throw new InvalidInputError(`cannot read host:port ${JSON.stringify(entry)} in a ${match[1]}:// URL`);
      return { host: hostPort[1]!.replace(/^\[|\]$/g, ""), port: hostPort[2] ? Number(hostPort[2]) : scheme.defaultPort };
    });
  if (nodes.length === 0) throw new InvalidInputError(`a ${match[1]}:// URL needs at least one host:port`);
  const masterName = scheme.kind === "sentinel" ? decodeURIComponent(path ?? "") : null;
  if (scheme.kind === "sentinel" && !masterName) {
    throw new InvalidInputError(`a ${match[1]}:// URL ends in /<master name>, the name the sentinels monitor the primary under`);
  }
  let username: string | undefined;
  let password: string | undefined;
  if (credentials) {
    const colon = credentials.indexOf(":");
    username = decodeURIComponent(colon < 0 ? credentials : credentials.slice(0, colon)) || undefined;
    password = colon < 0 ? undefined : decodeURIComponent(credentials.slice(colon + 1));
  }
  return { kind: scheme.kind, nodes, masterName, username, password, tls: scheme.tls };
}

function openTopology(topology: TopologyUrl, options: RedisOptions, clusterOptions: Partial<ClusterOptions>): Client {
  const auth: RedisOptions = {
    ...(topology.username !== undefined ? { username: topology.username } : {}),
    ...(topology.password !== undefined ? { password: topology.password } : {}),
    ...(topology.tls ? { tls: {} } : {}),
  };
  if (topology.kind === "cluster") {
    // Commands wait out a failover or a slot move (CLUSTERDOWN, TRYAGAIN, MOVED/ASK) in ioredis'
    // retry loop; the defaults retry every 100 ms.
    return new Cluster(topology.nodes, { ...clusterOptions, redisOptions: { ...options, ...auth } });
  }
  // ioredis asks the sentinels for the primary on every (re)connect and checks it is one (ROLE),
  // so after a failover it follows the new primary by itself. Two more ways to leave a primary
  // that is one no longer: the sentinels' +switch-master announcement (failoverDetector) drops
  // the connection at once, and a READONLY reply (the server was demoted to a replica under us)
  // reconnects, without sending the refused command again.
  return keepConnecting(
    new Redis({
      ...options,
      ...auth,
      sentinels: topology.nodes,
      name: topology.masterName!,
      failoverDetector: true,
      reconnectOnError: (error) => (error.message.startsWith("READONLY") ? 1 : false),
      ...(topology.tls ? { enableTLSForSentinelMode: true } : {}),
    }),
  );
}

/** Connections closed by {@link quit}: they stay closed. */
const closedByUs = new WeakSet<Client>();

/**
 * Makes a Sentinel-watched connection reconnect after ioredis gives up on it.
 *
 * ioredis 5 ends a Sentinel client for good ("Connection is closed." on every command after) when
 * its connector is disconnected while it is still resolving the primary: the failover detector of
 * the previous connection hears `+switch-master` exactly then, during a failover. A 5-minute chaos
 * run stalled that way for 4.5 minutes. Only {@link quit} may end the connection: after any
 * other end it connects again from scratch (the sentinels name the primary anew). Commands sent
 * while it is ended fail at once, as on a lost connection, and callers retry them.
 */
export function keepConnecting<C extends Redis>(client: C): C {
  client.on("end", () => {
    if (closedByUs.has(client)) return;
    setTimeout(() => {
      if (closedByUs.has(client) || client.status !== "end") return;
      client.connect().catch(() => undefined);
    }, SENTINEL_RECONNECT_DELAY_MS).unref();
  });
  return client;
}

/** How long after ioredis ends a Sentinel connection it is connected again, ms. */
const SENTINEL_RECONNECT_DELAY_MS = 200;

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

/**
 * How long closing a connection waits for the replies still due (QUIT is answered after them)
 * before it drops the connection, ms. A server that stopped answering (a SIGSTOPped process, a
 * network partition that sends no reset, a cluster node still loading) never answers QUIT: the
 * close would wait for it forever.
 */
export const QUIT_GRACE_MS = 5_000;

/**
 * Closes a connection, waiting for replies still due, without waiting on one that is down, nor
 * longer than {@link QUIT_GRACE_MS} on one that does not answer. Commands still unanswered when it
 * gives up fail ("Connection is closed."), as on a dropped connection.
 */
export async function quit(client: Client): Promise<void> {
  closedByUs.add(client);
  // On a connection that is down QUIT would wait in the offline queue for a reconnect that may
  // never come.
  if (client.status !== "ready") {
    client.disconnect();
    return;
  }
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<"gave up">((resolve) => {
    timer = setTimeout(() => resolve("gave up"), QUIT_GRACE_MS);
  });
  // A QUIT that fails (the server went away meanwhile) leaves nothing to release but the socket.
  const quitting = client.quit().then(
    () => "quit" as const,
    () => "failed" as const,
  );
  const outcome = await Promise.race([quitting, gaveUp]);
  clearTimeout(timer);
  if (outcome !== "quit") client.disconnect();
  // QUIT ends the data connection only: the sentinel connections ioredis keeps to watch for
  // failovers (failoverDetector) go with disconnect(), or they keep reconnecting after close().
  if (!isCluster(client) && client.options.sentinels) client.disconnect();
}

/** A label for logs: scheme, host, port and db, never the password. */
export function describe(connection: ConnectionOption): string {
  const topology = typeof connection === "string" ? safeTopology(connection) : null;
  if (topology !== null) {
    const hosts = topology.nodes.map((n) => `${n.host}:${n.port}`).join(",");
    return topology.kind === "cluster" ? `redis-cluster://${hosts}` : `redis-sentinel://${hosts}/${topology.masterName ?? ""}`;
  }
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

/** The `code` of the error a command gets when its connection drops before the answer (the store is unavailable). */
export const CONNECTION_DROPPED = "CONVEYOR_REDIS_CONNECTION_DROPPED";

/**
 * Fails the commands a dropped connection took with it.
 *
 * With `autoResendUnfulfilledCommands: false`, ioredis 5 forgets the commands that were sent but
 * unanswered when the connection closed, without settling their promises (redis/ioredis#2193,
 * fixed after 5.11): a worker awaiting such a claim would wait forever. Every command is tracked
 * here until it settles, and the connection's `close` rejects the ones on the wire: sent while it
 * was ready, or issued while it was down and then written from ioredis' offline queue when it
 * became ready (a reconnect that drops again, as in a Sentinel failover, took those with it too).
 * Commands still in the offline queue at a close are not touched: ioredis sends them after the
 * next reconnect, or fails them itself after `maxRetriesPerRequest` attempts.
 *
 * Only used where resending is off; a client that resends (ioredis' default, e.g. one passed in
 * by the application) settles its commands itself, after running them again.
 */
export class InFlight {
  /** Commands written to the connection and not yet answered. */
  private readonly sent = new Set<(error: Error) => void>();
  /** Commands issued while the connection was down: in ioredis' offline queue. */
  private readonly queued = new Set<(error: Error) => void>();
  private readonly tracking: boolean;

  constructor(private readonly client: Client) {
    this.tracking = !isCluster(client) && client.options.autoResendUnfulfilledCommands === false;
    if (this.tracking) {
      client.on("close", this.onClose);
      client.on("ready", this.onReady);
    }
  }

  /**
   * True when the connection may send a command a second time after its reply was lost (a
   * cluster, or a client that resends): an add must then say which attempt it is (keys.ts
   * `addAttempt`), or its resend would answer "duplicate" for its own jobs.
   */
  get mayResend(): boolean {
    return !this.tracking;
  }

  /** Sends a command (or a script call) through `send`, failing it if the connection drops first. */
  run<T>(send: () => Promise<T>): Promise<T> {
    if (!this.tracking) return send();
    // Every command passes through here: no more closures and promises than it needs.
    return new Promise<T>((resolve, reject) => {
      (this.client.status === "ready" ? this.sent : this.queued).add(reject);
      send().then(
        (value) => {
          this.forget(reject);
          resolve(value);
        },
        (error: Error) => {
          this.forget(reject);
          reject(error);
        },
      );
    });
  }

  private forget(fail: (error: Error) => void): void {
    this.sent.delete(fail);
    this.queued.delete(fail);
  }

  /** Stops watching the connection (it stays open). */
  detach(): void {
    if (!this.tracking) return;
    this.client.off("close", this.onClose);
    this.client.off("ready", this.onReady);
  }

  // ioredis announces "ready" and then, in the same turn, writes its offline queue.
  private readonly onReady = () => {
    for (const fail of this.queued) this.sent.add(fail);
    this.queued.clear();
  };

  private readonly onClose = () => {
    if (this.sent.size === 0) return;
    const error = Object.assign(
      new ConveyorError(
        "the connection to Redis dropped before it answered; the command may or may not have run " +
          "(fenced settles can simply be sent again; an unanswered claim's jobs return after their lease expires)",
      ),
      { code: CONNECTION_DROPPED },
    );
    const sent = [...this.sent];
    this.sent.clear();
    for (const fail of sent) fail(error);
  };
}

function safeTopology(url: string): TopologyUrl | null {
  try {
    return parseTopologyUrl(url);
  } catch {
    return null;
  }
}
