/**
 * What a worker remembers of the flow control its claims met (ClaimRequest.onThrottle): which
 * queues' next start lies in the future, and until when. The worker leaves those queues out of
 * its claims until then, so a rate-limited queue costs the store one claim per slot that opens,
 * not one per wake-up or poll.
 */
export class QueueThrottle {
  /** Queue -> time (performance.now() ms) before which claiming it would find nothing. */
  private readonly until = new Map<string, number>();

  /** Notes a claim's throttle: `retryInMs` null means "waits on running jobs" (poll as usual). */
  note(queue: string, retryInMs: number | null, now = performance.now()): void {
    if (retryInMs === null) return;
    const at = now + retryInMs;
    if (at > (this.until.get(queue) ?? 0)) this.until.set(queue, at);
  }

  /** The queues among `queues` that may have a start now. */
  open(queues: readonly string[], now = performance.now()): string[] {
    if (this.until.size === 0) return [...queues];
    return queues.filter((queue) => {
      const at = this.until.get(queue);
      if (at === undefined) return true;
      if (at > now) return false;
      this.until.delete(queue);
      return true;
    });
  }

  /** Ms until the first throttled queue opens, or null when none is throttled. */
  nextOpenInMs(now = performance.now()): number | null {
    let first: number | null = null;
    for (const at of this.until.values()) first = first === null ? at : Math.min(first, at);
    return first === null ? null : Math.max(0, first - now);
  }
}
