import type { Backend, ClaimedJob, ClaimRequest, Completion, Failure, SettleResult } from "../backend/contract.js";
import type { Lease } from "../core/job.js";

/**
 * A claim riding along with a batch of completions (`Backend.completeAndClaim`): what to claim,
 * and where the claimed jobs (or the error) go.
 */
export interface ClaimRide {
  request: ClaimRequest;
  deliver(claimed: ClaimedJob[]): void;
  failed(error: unknown): void;
}

/**
 * `bytes`: about how much of the statement this item makes: a result's JSON (UTF-8 bytes, or
 * UTF-16 code units when that is well under the bound), an error's text (code units).
 */
type Pending<T> = { item: T; bytes: number; resolve: (r: SettleResult) => void; reject: (e: unknown) => void };

/**
 * The most bytes of results or error text one settle call carries; a batch past it goes out in
 * several calls, one after another. A batch is every settle gathered since the last one went out: fifty
 * results of 40 MB made one PostgreSQL statement over V8's longest string ("Invalid string
 * length"), refused every time it was tried again, and none of the fifty jobs could finish.
 */
export const SETTLE_CALL_MAX_BYTES = 32 * 1024 * 1024;

/**
 * Collects settle calls and sends each kind as one batch: those made in the same turn of the event
 * loop, and those made while the batch before was on its way. Fifty handlers finishing together
 * cost one store round trip, not fifty.
 */
export class Settler {
  private completes: Pending<Completion>[] = [];
  private fails: Pending<Failure>[] = [];
  private releases: Pending<Lease>[] = [];
  private scheduled = false;
  private inFlight: Promise<void> = Promise.resolve();

  /**
   * `takeClaim`, when given, is asked as each batch of completions goes out whether the worker
   * wants a claim sent with it; on a backend with `completeAndClaim` both then take one round trip.
   */
  constructor(
    private readonly backend: Backend,
    private readonly takeClaim: (() => ClaimRide | null) | null = null,
  ) {}

  /**
   * Whether a claim asked for now would ride with completions: some are about to go out and the
   * backend can send both at once. The worker then may leave the claim to the settler (which
   * sends it behind any batch still on its way).
   */
  get carriesClaims(): boolean {
    return this.completes.length > 0 && this.takeClaim !== null && this.backend.capabilities.completeAndClaim === true;
  }

  /** `resultBytes`: the size of the result's JSON (what it adds to the batch's statement). */
  complete(item: Completion, resultBytes = 0): Promise<SettleResult> {
    return this.push(this.completes, item, resultBytes);
  }

  fail(item: Failure): Promise<SettleResult> {
    const { name, message, stack } = item.error;
    return this.push(this.fails, item, name.length + message.length + (stack?.length ?? 0));
  }

  release(lease: Lease): Promise<SettleResult> {
    return this.push(this.releases, lease, 0);
  }

  /** Resolves once everything queued so far has reached the store. */
  async drain(): Promise<void> {
    while (this.scheduled || this.completes.length || this.fails.length || this.releases.length) {
      await this.flush();
    }
    await this.inFlight;
  }

  /** Completions, with the worker's next claim when it wants one and the backend can carry it. */
  private async sendCompletes(batch: Pending<Completion>[]): Promise<void> {
    const backend = this.backend;
    const [completes = [], ...more] = bySize(batch);
    const ride = completes.length > 0 && backend.capabilities.completeAndClaim === true && backend.completeAndClaim ? (this.takeClaim?.() ?? null) : null;
    await this.sendFirstCompletes(completes, ride);
    for (const part of more) await send(part, (items) => backend.complete(items));
  }

  private async sendFails(batch: Pending<Failure>[]): Promise<void> {
    for (const part of bySize(batch)) await send(part, (items) => this.backend.fail(items));
  }

  private async sendFirstCompletes(completes: Pending<Completion>[], ride: ClaimRide | null): Promise<void> {
    const backend = this.backend;
    if (ride === null) return send(completes, (items) => backend.complete(items));
    let claimed: ClaimedJob[] = [];
    let failure: { error: unknown } | null = null;
    await send(completes, async (items) => {
      try {
        const result = await backend.completeAndClaim!(items, ride.request);
        claimed = result.claimed;
        return result.settled;
      } catch (error) {
        failure = { error };
        throw error;
      }
    });
    // send() hands an error to every completion (the worker retries those); the claim hears it too.
    if (failure === null) ride.deliver(claimed);
    else ride.failed((failure as { error: unknown }).error);
  }

  private push<T>(list: Pending<T>[], item: T, bytes: number): Promise<SettleResult> {
    return new Promise((resolve, reject) => {
      list.push({ item, bytes, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  private flush(): Promise<void> {
    this.scheduled = false;
    // Batches go out one after another so a job's release can never overtake its own completion.
    // Each takes what has gathered by the time the one before it is answered, not only what one
    // turn of the event loop made: handlers that await their own I/O finish a few per turn, and
    // a batch per turn sent 3,133 completions for 5,000 jobs on PostgreSQL, queued one behind the
    // other (docs/performance-postgres.md, "Session 34").
    this.inFlight = this.inFlight.then(async () => {
      const completes = this.completes;
      const fails = this.fails;
      const releases = this.releases;
      this.completes = [];
      this.fails = [];
      this.releases = [];
      await Promise.all([this.sendCompletes(completes), this.sendFails(fails), send(releases, (items) => this.backend.release(items))]);
    });
    return this.inFlight;
  }
}

async function send<T>(batch: Pending<T>[], call: (items: T[]) => Promise<SettleResult[]>): Promise<void> {
  if (batch.length === 0) return;
  try {
    const results = await call(batch.map((p) => p.item));
    batch.forEach((p, i) => p.resolve(results[i] ?? "stale"));
  } catch (error) {
    for (const p of batch) p.reject(error);
  }
}

/** `batch` in order, in parts of at most SETTLE_CALL_MAX_BYTES (an item larger than that alone). */
function bySize<T>(batch: Pending<T>[]): Pending<T>[][] {
  let total = 0;
  for (const p of batch) total += p.bytes;
  // Nearly always: one call, nothing copied.
  if (total <= SETTLE_CALL_MAX_BYTES) return [batch];
  const parts: Pending<T>[][] = [];
  let part: Pending<T>[] = [];
  let bytes = 0;
  for (const p of batch) {
    if (part.length > 0 && bytes + p.bytes > SETTLE_CALL_MAX_BYTES) {
      parts.push(part);
      part = [];
      bytes = 0;
    }
    part.push(p);
    bytes += p.bytes;
  }
  if (part.length > 0) parts.push(part);
  return parts;
}
