/**
 * Group commit for enqueue requests: the jobs of concurrent requests are stored by one
 * `backend.enqueue` call (one transaction, one fsync on PostgreSQL, one Lua script round on
 * Redis) instead of one call each.
 *
 * How: a request's jobs join the pending batch; the batch is flushed on the next turn of the
 * event loop (`setImmediate`), or — while a flush is in flight — as soon as that flush returns.
 * So a lone request waits for nothing, and under load batches grow with concurrency: throughput
 * rises while each request still gets its answer only after its own rows are committed.
 *
 * Nothing about the guarantees changes: the batch call is atomic and reports duplicates per job
 * (the contract says a repeated id in one batch is a duplicate, as across calls), and a bulk
 * request's jobs stay together in one call. If a batch fails, each request of it is retried alone,
 * so one request's failure never becomes another's.
 */
import type { Backend, EnqueueResult } from "../backend/contract.js";
import type { JobSpec } from "../core/job.js";

interface Pending {
  specs: readonly JobSpec[];
  resolve: (results: EnqueueResult[]) => void;
  reject: (error: unknown) => void;
}

export class EnqueueBatcher {
  private pending: Pending[] = [];
  private scheduled = false;
  private inFlight = false;

  constructor(
    private readonly backend: Backend,
    /** Most jobs per backend call; a request larger than this goes alone. */
    private readonly maxJobs = 1_000,
  ) {}

  enqueue(specs: readonly JobSpec[]): Promise<EnqueueResult[]> {
    return new Promise<EnqueueResult[]>((resolve, reject) => {
      this.pending.push({ specs, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    if (this.inFlight || this.pending.length === 0) return;
    this.inFlight = true;
    // Take whole requests, up to maxJobs (at least one request, however large).
    const batch: Pending[] = [];
    let jobs = 0;
    while (this.pending.length > 0 && (batch.length === 0 || jobs + this.pending[0]!.specs.length <= this.maxJobs)) {
      const p = this.pending.shift()!;
      batch.push(p);
      jobs += p.specs.length;
    }
    try {
      await this.store(batch);
    } finally {
      this.inFlight = false;
      if (this.pending.length > 0) this.schedule();
    }
  }

  private async store(batch: Pending[]): Promise<void> {
    if (batch.length === 1) {
      const [only] = batch;
      await this.backend.enqueue(only!.specs).then(only!.resolve, only!.reject);
      return;
    }
    let results: EnqueueResult[];
    try {
      results = await this.backend.enqueue(batch.flatMap((p) => p.specs));
    } catch {
      // Retry each request alone: a failure then only reaches the request that causes it.
      for (const p of batch) await this.backend.enqueue(p.specs).then(p.resolve, p.reject);
      return;
    }
    let offset = 0;
    for (const p of batch) {
      p.resolve(results.slice(offset, offset + p.specs.length));
      offset += p.specs.length;
    }
  }
}
