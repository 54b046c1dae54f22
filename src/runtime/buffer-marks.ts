import type { Backend, ClaimedJob } from "../backend/contract.js";
import type { Lease } from "../core/job.js";

/**
 * Tells the store which claimed jobs wait unstarted in the prefetch buffer and which of those have
 * started since (`Backend.markBuffered`), so a worker death while a job was only buffered does not
 * count toward that job's quarantine (`maxStalls`).
 *
 * A claimed job counts as started in the store until marked, so only the jobs a claim brought
 * beyond the free slots are marked buffered, and only those are marked started again when they
 * start. One call is in flight at a time and marks wait behind it, so a lease's "buffered" always
 * reaches the store before its "started". A start is sent at once (not on the next tick): a
 * handler that kills its process right away should still be on record as started. A mark that
 * fails is reported and dropped: the job is then judged by what the store last knew, which only
 * makes it more or less likely to be blamed for a later death, never loses it.
 */
export class BufferMarks {
  /** Buffered, not sent yet: a start before the send cancels the mark instead of sending two. */
  private readonly toBuffer = new Map<string, Lease>();
  /** Buffered, and sent (or on its way): their start must be sent. */
  private readonly sentBuffered = new Set<string>();
  private readonly toStart = new Map<string, Lease>();
  private inFlight: Promise<void> | null = null;

  /** `backend` null: no marks are sent (the worker's marks could change no verdict, see LeaseKeeper). */
  constructor(
    private readonly backend: Backend | null,
    private readonly onError: (error: unknown, during: string) => void,
  ) {}

  /** False when no marks are sent, or the store keeps none (it counts no stalls): then every call is a no-op. */
  get enabled(): boolean {
    return typeof this.backend?.markBuffered === "function";
  }

  buffered(leases: readonly Lease[]): void {
    if (!this.enabled || leases.length === 0) return;
    for (const lease of leases) this.toBuffer.set(key(lease), lease);
    this.flush();
  }

  started(lease: Lease): void {
    // Nearly always: no marks at all (concurrency 2 or more), so no key to build for every job.
    if (this.toBuffer.size === 0 && this.sentBuffered.size === 0) return;
    const k = key(lease);
    if (this.toBuffer.delete(k)) return;
    if (!this.sentBuffered.delete(k)) return;
    this.toStart.set(k, lease);
    this.flush();
  }

  /**
   * Of a claim's jobs, those the store recorded as buffered with the claim itself
   * (`ClaimedJob.markedBuffered`, `capabilities.claimMarksBuffered`): nothing to send now, their
   * start when they start. Takes the whole claim so that a worker sending no marks (every worker
   * at concurrency 2 or more) builds nothing per claim.
   */
  bufferedByClaim(claimed: readonly ClaimedJob[]): void {
    if (!this.enabled) return;
    for (const c of claimed) if (c.markedBuffered === true) this.sentBuffered.add(key(c.lease));
  }

  /** The lease left the buffer without starting (released, lost): nothing more to send for it. */
  forget(lease: Lease): void {
    const k = key(lease);
    this.toBuffer.delete(k);
    this.sentBuffered.delete(k);
  }

  /** Resolves once every mark asked for so far has been sent (or failed). */
  async settled(): Promise<void> {
    while (this.inFlight) await this.inFlight;
  }

  private flush(): void {
    if (this.inFlight || (this.toBuffer.size === 0 && this.toStart.size === 0)) return;
    const buffer = [...this.toBuffer.values()];
    const start = [...this.toStart.values()];
    this.toBuffer.clear();
    this.toStart.clear();
    for (const lease of buffer) this.sentBuffered.add(key(lease));
    const send = async (): Promise<void> => {
      // Started first: a lease in both lists cannot exist (a start cancels an unsent buffered mark).
      if (start.length > 0) await this.backend!.markBuffered!(start, false);
      if (buffer.length > 0) await this.backend!.markBuffered!(buffer, true);
    };
    this.inFlight = send()
      .catch((error: unknown) => this.onError(error, `marking ${buffer.length} job(s) buffered and ${start.length} started`))
      .finally(() => {
        this.inFlight = null;
        this.flush();
      });
  }
}

function key(lease: Lease): string {
  return `${lease.jobId}\u0000${lease.token}`;
}
