/**
 * `WAIT` after every script (the `waitForReplicas` option of RedisBackend).
 *
 * Redis replicates asynchronously: a script's reply (an enqueue, a completion) reaches the client
 * before any replica has the write, and a primary killed in that window takes the write with it
 * when a replica is promoted (docs/failover.md measures how many). `WAIT n timeout` after the
 * write blocks until n replicas acknowledged everything this connection wrote, so a reply then
 * means the write is on n + 1 servers (see ReplicaWaiter for how the WAITs are shared and routed).
 *
 * WAIT does not make Redis strongly consistent (a replica that acknowledged can still lose the
 * race in some failovers), but it closes the common window: acknowledged, never replicated.
 */
import { ConveyorError, InvalidInputError } from "../../core/errors.js";
import { CONNECTION_DROPPED, isCluster, type Client } from "./connection.js";
import { hashTagOf } from "./slot-migration.js";
import { shown } from "../../core/checks.js";

/** What the option takes. */
export interface WaitForReplicas {
  /** Replicas that must acknowledge each write. Integer >= 1. */
  replicas: number;
  /** How long to wait for them, ms. Integer >= 1. Default 1000. */
  timeoutMs?: number;
}

export const DEFAULT_REPLICA_WAIT_TIMEOUT_MS = 1_000;

export function checkWaitForReplicas(option: WaitForReplicas): Required<WaitForReplicas> {
  const timeoutMs = option.timeoutMs ?? DEFAULT_REPLICA_WAIT_TIMEOUT_MS;
  if (!Number.isInteger(option.replicas) || option.replicas < 1) {
    throw new InvalidInputError(`waitForReplicas.replicas must be an integer >= 1; got ${shown(option.replicas)}`);
  }
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
    throw new InvalidInputError(`waitForReplicas.timeoutMs must be an integer >= 1 (ms); got ${shown(timeoutMs)}`);
  }
  return { replicas: option.replicas, timeoutMs };
}

/** Thrown when fewer replicas than asked acknowledged a write in time: it happened on the primary only. */
export class ReplicaWaitError extends ConveyorError {}

/** A WAIT sent (or about to be) on one route, and how to fail it when its connection drops. */
interface PendingWait {
  readonly promise: Promise<number>;
  /** The connection it went out on (see {@link ReplicaWaiter}). */
  readonly epoch: number;
  fail(error: Error): void;
}

/** Per route: the WAIT out now, and the one that follows it, shared by the writes that answered meanwhile. */
interface Route {
  out: PendingWait | null;
  next: Promise<PendingWait> | null;
}

/**
 * Runs scripts followed by `WAIT`, one WAIT at a time per connection, shared by every write that
 * answered before it was sent (a group commit).
 *
 * `WAIT` blocks the connection it is sent on: Redis reads nothing more from it until the WAIT
 * answers. One WAIT per script (the first version: script and WAIT in one pipeline) made the
 * writes of a connection queue behind each other's WAITs, harmless while the replica answers at
 * once, but right after a failover the promoted replica has no replica of its own, every WAIT
 * runs to its timeout, and the 32nd add in flight answered after 32 timeouts (docs/failover.md:
 * "adds in flight across a Sentinel failover never settle"). Here a write that answers while a
 * WAIT is out waits for that one to answer and then for the next, which is sent after its reply
 * and so covers it (WAIT covers every write its connection made before it): a write answers
 * within about two timeouts however many are in flight, and a busy connection sends one WAIT
 * per batch instead of one per script.
 *
 * A WAIT covers the writes of its own connection only. The connection is counted (`epoch`, one
 * more at each close): a write whose connection closed before its WAIT went out, or whose WAIT
 * was on the wire when the connection closed, is not confirmed; the call fails as a dropped
 * connection does (the write did happen on the primary; it may or may not be on a replica).
 *
 * On Redis Cluster the WAIT must reach the node that ran the script: it is sent in a pipeline
 * behind an `EXISTS` of the script's first key, which ioredis routes to the key's node. Routes are
 * per hash tag there (one per queue), one for the whole connection on a single server.
 */
export class ReplicaWaiter {
  private readonly routes = new Map<string, Route>();
  private epoch = 0;
  private readonly cluster: boolean;

  constructor(
    private readonly client: Client,
    private readonly wait: Required<WaitForReplicas>,
  ) {
    this.cluster = isCluster(client);
    if (!this.cluster) client.on("close", this.onClose);
  }

  /** Stops watching the connection (it stays open). */
  detach(): void {
    if (!this.cluster) this.client.off("close", this.onClose);
  }

  /** Sends `command` (EVAL or EVALSHA with its arguments); its reply once enough replicas have the write. */
  async call(command: string, args: readonly unknown[]): Promise<unknown> {
    const reply = await this.client.call(command, ...(args as Array<string | number | Buffer>));
    // The connection that just answered: the WAIT must be sent on it.
    const epoch = this.epoch;
    // EVAL / EVALSHA: script, number of keys, first key.
    const routeKey = typeof args[2] === "string" ? args[2] : "";
    const pending = await this.after(this.cluster ? hashTagOf(routeKey) : "", routeKey);
    if (pending.epoch !== epoch) throw dropped();
    const acknowledged = await pending.promise;
    if (acknowledged < this.wait.replicas) {
      throw new ReplicaWaitError(
        `the write reached the Redis primary, but only ${acknowledged} of ${this.wait.replicas} replica(s) acknowledged it within ` +
          `${this.wait.timeoutMs} ms (WAIT): a failover now could lose it. Check the replicas (INFO replication), or lower waitForReplicas`,
      );
    }
    return reply;
  }

  /** A WAIT sent after now on the route: the one out if none is, else the one following it. */
  private after(tag: string, routeKey: string): Promise<PendingWait> {
    let route = this.routes.get(tag);
    if (route === undefined) {
      route = { out: null, next: null };
      this.routes.set(tag, route);
    }
    if (route.out === null) return Promise.resolve(this.send(route, tag, routeKey));
    // The WAIT out may have been sent before this write: the next one covers it.
    const current = route.out;
    route.next ??= current.promise.then(
      () => this.sendNext(route, tag, routeKey),
      () => this.sendNext(route, tag, routeKey),
    );
    return route.next;
  }

  private sendNext(route: Route, tag: string, routeKey: string): PendingWait {
    route.next = null;
    return this.send(route, tag, routeKey);
  }

  private send(route: Route, tag: string, routeKey: string): PendingWait {
    let fail: (error: Error) => void = () => undefined;
    const failed = new Promise<never>((_, reject) => (fail = reject));
    const promise = Promise.race([this.sendWait(routeKey), failed]);
    const pending: PendingWait = { promise, epoch: this.epoch, fail };
    route.out = pending;
    const done = (): void => {
      if (route.out === pending) route.out = null;
      if (route.out === null && route.next === null) this.routes.delete(tag);
    };
    promise.then(done, done);
    return pending;
  }

  private async sendWait(routeKey: string): Promise<number> {
    if (!this.cluster) return Number(await this.client.call("WAIT", this.wait.replicas, this.wait.timeoutMs));
    const results = await this.client.pipeline().exists(routeKey).call("WAIT", this.wait.replicas, this.wait.timeoutMs).exec();
    if (results === null) throw new ConveyorError("the Redis pipeline was discarded before it ran");
    const acks = results[1];
    if (acks?.[0]) throw acks[0];
    return Number(acks?.[1]);
  }

  // ioredis 5 forgets a command on the wire when its connection closes (connection.ts, InFlight):
  // a WAIT out then would hold every write behind it for good.
  private readonly onClose = (): void => {
    this.epoch++;
    for (const route of this.routes.values()) {
      route.out?.fail(dropped());
      route.out = null;
    }
  };
}

function dropped(): Error {
  return Object.assign(
    new ConveyorError(
      "the connection to Redis dropped before the replicas confirmed the write (WAIT); the write may or may not be on a replica " +
        "(fenced settles can simply be sent again; an add is safe to repeat with the same jobId)",
    ),
    { code: CONNECTION_DROPPED },
  );
}
