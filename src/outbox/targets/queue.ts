/**
 * Target: a Conveyor queue on any backend. Each event becomes a job named after its topic, with
 * the outbox id as the job id: a redelivered event is a duplicate of the job already stored (the
 * backend's dedup by id), never a second job — as long as that job is still there, i.e. within the
 * queue's retention (`removeOnComplete`, default 24 h).
 */
import type { Backend } from "../../backend/contract.js";
import { InvalidInputError } from "../../core/errors.js";
import type { JobSpec } from "../../core/job.js";
import type { Json } from "../../core/json.js";
import { buildJobSpec, checkJobDefaults, checkName, type JobDefaults } from "../../core/spec.js";
import type { OutboxEvent } from "../event.js";
import type { PublishOutcome, Target } from "../target.js";

/** Options of {@link QueueTarget}. */
export interface QueueTargetOptions {
  /** The backend the queue lives on (opened and closed by you, or by `conveyor relay`). */
  backend: Backend;
  /** The queue that receives the jobs. */
  queue: string;
  /**
   * Job options applied to every job (attempts, backoff, retention…). Default: the queue
   * defaults of `queue.add`. `removeOnComplete: true` would delete a job as it completes and so
   * lose the dedup of a later redelivery: keep the default retention or longer.
   */
  jobDefaults?: JobDefaults;
  /** Close the backend with the target. Default false. */
  closeBackend?: boolean;
}

export class QueueTarget implements Target {
  readonly description: string;
  private readonly backend: Backend;
  private readonly queue: string;
  private readonly jobDefaults: JobDefaults | undefined;
  private readonly closeBackend: boolean;

  constructor(options: QueueTargetOptions) {
    if (!options?.backend) throw new InvalidInputError("QueueTarget needs { backend, queue }");
    this.backend = options.backend;
    // Validated by the same rules as queue.add, at construction rather than per event.
    checkName("queue", options.queue);
    checkJobDefaults("QueueTarget option jobDefaults", options.jobDefaults);
    this.queue = options.queue;
    this.jobDefaults = options.jobDefaults;
    this.closeBackend = options.closeBackend ?? false;
    this.description = `queue:${this.queue}@${this.backend.description}`;
  }

  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    const outcomes: PublishOutcome[] = new Array<PublishOutcome>(events.length);
    const specs: JobSpec[] = [];
    const positions: number[] = [];
    events.forEach((event, i) => {
      try {
        const meta: { [key: string]: Json } = {
          outbox: { id: event.id, topic: event.topic, key: event.key, headers: event.headers, createdAt: event.createdAt },
        };
        specs.push(
          buildJobSpec({
            queue: this.queue,
            name: event.topic,
            data: JSON.parse(event.payloadText) as Json,
            options: { jobId: event.id, meta },
            defaults: this.jobDefaults,
            maxPayloadBytes: Number.MAX_SAFE_INTEGER,
          }),
        );
        positions.push(i);
      } catch (error) {
        // A topic that is no valid job name can never become a job: set it aside.
        outcomes[i] = { status: "rejected", error: error as Error };
      }
    });
    if (specs.length > 0) {
      // One batch insert; a failure (store down) throws and the relay retries the whole batch.
      await this.backend.enqueue(specs);
      for (const i of positions) outcomes[i] = { status: "published" };
    }
    return outcomes;
  }

  async close(): Promise<void> {
    if (this.closeBackend) await this.backend.close();
  }
}
