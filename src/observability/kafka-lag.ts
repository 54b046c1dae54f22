/**
 * `conveyor_kafka_consumer_lag{group, topic, partition}`: the consumer lag of Kafka consumer
 * groups (a `KafkaWorker`'s, a `KafkaBackend`'s), per partition — records produced and not yet
 * committed by the group, Kafka's scaling signal. Read from the brokers at most once per
 * `cacheMs` (every scrape in between gets the same figures), bounded by `timeoutMs`, and bounded
 * in series: past `maxSeries` (group, topic, partition) triples the rest are summed under
 * `topic="_other", partition="_other"` of their group.
 *
 * Only a type of `src/kafka/lag.ts` is imported: serving these metrics never loads kafkajs.
 */
import { Counter, Gauge, type Registry } from "prom-client";
import type { LagSource, PartitionLag } from "../kafka/lag.js";

interface LagRow {
  group: string;
  topic: string;
  partition: string;
  lag: number;
}

export class KafkaLagGauge {
  private readonly sources = new Set<LagSource>();
  private cached: { at: number; rows: LagRow[] } | null = null;
  private inflight: Promise<LagRow[]> | null = null;
  private readonly errors: Counter;
  private readonly kept = new Set<string>();

  constructor(
    registers: Registry[],
    private readonly options: { cacheMs: number; timeoutMs: number; maxSeries: number; overflowLabel: string },
  ) {
    const read = () => this.read();
    this.errors = new Counter({
      name: "conveyor_kafka_consumer_lag_errors_total",
      help: "Failed reads of a consumer group's lag; its series are left out of that scrape.",
      registers,
    });
    new Gauge({
      name: "conveyor_kafka_consumer_lag",
      help: "Kafka consumer lag per group, topic and partition: records produced and not yet committed by the group (the scaling signal).",
      labelNames: ["group", "topic", "partition"] as const,
      registers,
      async collect() {
        const rows = await read();
        this.reset();
        for (const r of rows) this.inc({ group: r.group, topic: r.topic, partition: r.partition }, r.lag);
      },
    });
  }

  add(source: LagSource): () => void {
    this.sources.add(source);
    this.cached = null;
    return () => {
      this.sources.delete(source);
      this.cached = null;
    };
  }

  private async read(): Promise<LagRow[]> {
    if (this.cached && performance.now() - this.cached.at < this.options.cacheMs) return this.cached.rows;
    this.inflight ??= this.query().finally(() => {
      this.inflight = null;
    });
    return this.inflight;
  }

  private async query(): Promise<LagRow[]> {
    const rows: LagRow[] = [];
    for (const source of this.sources) {
      let lag: PartitionLag[];
      try {
        lag = await withTimeout(source.lag(), this.options.timeoutMs);
      } catch {
        this.errors.inc();
        continue;
      }
      for (const p of lag) {
        const key = `${source.groupId}\u0000${p.topic}\u0000${p.partition}`;
        const own = this.kept.has(key) || this.kept.size < this.options.maxSeries;
        if (own) this.kept.add(key);
        rows.push({
          group: source.groupId,
          topic: own ? p.topic : this.options.overflowLabel,
          partition: own ? String(p.partition) : this.options.overflowLabel,
          lag: p.lag,
        });
      }
    }
    this.cached = { at: performance.now(), rows };
    return rows;
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    timer.unref();
    promise.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
