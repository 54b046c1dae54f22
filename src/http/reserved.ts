/**
 * What belongs to Conveyor itself and no client may write, whichever route the write comes by
 * (an enqueue, or a schedule whose ticks enqueue): the `conveyor.` queues and `meta.conveyor`.
 */
import { HttpProblem } from "./problem.js";

/** Refuses (403) a queue reserved for Conveyor itself. */
export function checkClientQueue(queue: string): void {
  // The webhook delivery queue (and any future internal one) is not for clients: a forged
  // delivery would make the server sign a body of the client's choosing.
  if (queue.startsWith("conveyor.")) {
    throw new HttpProblem(403, "reserved-queue", `queue "${queue}" is reserved for Conveyor itself (names starting with "conveyor."); use another queue name`);
  }
}

/**
 * Why a client's job metadata is refused, or null when it may be stored. `meta.conveyor` holds
 * what the server vouches for (the owning key, the callback URL): a client that could write it
 * would make its jobs claim another key as their owner.
 */
export function reservedMetaProblem(meta: unknown): string | null {
  // Not an object at all is the option checks' to refuse, with their own message.
  return typeof meta === "object" && meta !== null && Object.hasOwn(meta, "conveyor") ? 'the meta key "conveyor" is reserved; use another key' : null;
}
