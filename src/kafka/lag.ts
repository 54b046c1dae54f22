/**
 * Consumer lag, the scaling signal of a Kafka consumer group: per partition, the messages
 * produced (the high watermark) and not yet committed by the group. Shared by the
 * `KafkaWorker` transport and the `KafkaBackend` job store, and exported as a Prometheus gauge
 * by `ConveyorMetrics` (`conveyor_kafka_consumer_lag`).
 */
import type { Admin } from "kafkajs";

/** Consumer lag of one partition: the scaling signal (messages produced and not yet committed by the group). */
export interface PartitionLag {
  topic: string;
  partition: number;
  /** Offset the next produced message gets. */
  highWatermark: number;
  /** The group's committed offset (the next message it will read); the log start when it has none. */
  committed: number;
  /** highWatermark − committed. */
  lag: number;
}

/** Lag of `groupId` on every partition of `topics`, sorted by topic then partition. */
export async function groupLag(admin: Admin, groupId: string, topics: readonly string[]): Promise<PartitionLag[]> {
  if (topics.length === 0) return [];
  const out: PartitionLag[] = [];
  const committed = await admin.fetchOffsets({ groupId, topics: [...topics] });
  for (const topic of topics) {
    const ends = await admin.fetchTopicOffsets(topic);
    const group = committed.find((c) => c.topic === topic)?.partitions ?? [];
    for (const end of ends) {
      const high = Number(end.high);
      const own = Number(group.find((p) => p.partition === end.partition)?.offset ?? -1);
      const at = own >= 0 ? own : Number(end.low);
      out.push({ topic, partition: end.partition, highWatermark: high, committed: at, lag: Math.max(0, high - at) });
    }
  }
  return out.sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
}

/** Something that reports its consumer group's lag: a `KafkaWorker` or a `KafkaBackend`. */
export interface LagSource {
  /** The consumer group whose lag this is. */
  readonly groupId: string;
  lag(): Promise<PartitionLag[]>;
}
