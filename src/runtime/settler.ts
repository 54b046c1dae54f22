import type { Backend, Completion, Failure, SettleResult } from "../backend/contract.js";
import type { Lease } from "../core/job.js";

type Pending<T> = { item: T; resolve: (r: SettleResult) => void; reject: (e: unknown) => void };

/**
 * Collects settle calls made in the same turn of the event loop and sends each kind as one batch:
 * fifty handlers finishing together cost one store round trip, not fifty.
 */
export class Settler {
  private completes: Pending<Completion>[] = [];
  private fails: Pending<Failure>[] = [];
  private releases: Pending<Lease>[] = [];
  private scheduled = false;
  private inFlight: Promise<void> = Promise.resolve();

  constructor(private readonly backend: Backend) {}

  complete(item: Completion): Promise<SettleResult> {
    return this.push(this.completes, item);
  }

  fail(item: Failure): Promise<SettleResult> {
    return this.push(this.fails, item);
  }

  release(lease: Lease): Promise<SettleResult> {
    return this.push(this.releases, lease);
  }

  /** Resolves once everything queued so far has reached the store. */
  async drain(): Promise<void> {
    while (this.scheduled || this.completes.length || this.fails.length || this.releases.length) {
      await this.flush();
    }
    await this.inFlight;
  }

  private push<T>(list: Pending<T>[], item: T): Promise<SettleResult> {
    return new Promise((resolve, reject) => {
      list.push({ item, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  private flush(): Promise<void> {
    this.scheduled = false;
    const completes = this.completes;
    const fails = this.fails;
    const releases = this.releases;
    this.completes = [];
    this.fails = [];
    this.releases = [];
    // Batches go out one after another so a job's release can never overtake its own completion.
    this.inFlight = this.inFlight.then(async () => {
      await Promise.all([
        send(completes, (items) => this.backend.complete(items)),
        send(fails, (items) => this.backend.fail(items)),
        send(releases, (items) => this.backend.release(items)),
      ]);
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
