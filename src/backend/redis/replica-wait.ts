/**
 * `WAIT` after every script (the `waitForReplicas` option of RedisBackend).
 *
 * Redis replicates asynchronously: a script's reply (an enqueue, a completion) reaches the client
 * before any replica has the write, and a primary killed in that window takes the write with it
 * when a replica is promoted (docs/failover.md measures how many). `WAIT n timeout` after the
 * write blocks until n replicas acknowledged everything this connection wrote, so a reply then
 * means the write is on n + 1 servers. It is sent in one pipeline with the script, so on Redis
 * Cluster it reaches the same node (ioredis routes the pipeline by the script's keys).
 *
 * WAIT does not make Redis strongly consistent (a replica that acknowledged can still lose the
 * race in some failovers), but it closes the common window: acknowledged, never replicated.
 */
import { ConveyorError, InvalidInputError } from "../../core/errors.js";
import type { Client } from "./connection.js";

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
    throw new InvalidInputError(`waitForReplicas.replicas must be an integer >= 1; got ${JSON.stringify(option.replicas)}`);
  }
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
    throw new InvalidInputError(`waitForReplicas.timeoutMs must be an integer >= 1 (ms); got ${JSON.stringify(timeoutMs)}`);
  }
  return { replicas: option.replicas, timeoutMs };
}

/** Thrown when fewer replicas than asked acknowledged a write in time: it happened on the primary only. */
export class ReplicaWaitError extends ConveyorError {}

/** Sends `command` then `WAIT` in one pipeline; the command's reply once enough replicas have it. */
export async function callThenWait(client: Client, command: string, args: readonly unknown[], wait: Required<WaitForReplicas>): Promise<unknown> {
  const results = await client
    .pipeline()
    .call(command, ...(args as Array<string | number | Buffer>))
    .call("WAIT", wait.replicas, wait.timeoutMs)
    .exec();
  if (results === null) throw new ConveyorError("the Redis pipeline was discarded before it ran");
  const [script, acks] = results;
  if (script?.[0]) throw script[0];
  if (acks?.[0]) throw acks[0];
  const acknowledged = Number(acks?.[1]);
  if (acknowledged < wait.replicas) {
    throw new ReplicaWaitError(
      `the write reached the Redis primary, but only ${acknowledged} of ${wait.replicas} replica(s) acknowledged it within ` +
        `${wait.timeoutMs} ms (WAIT): a failover now could lose it. Check the replicas (INFO replication), or lower waitForReplicas`,
    );
  }
  return script?.[1];
}
