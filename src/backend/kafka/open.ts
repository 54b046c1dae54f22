/**
 * `kafka://host:9092[,host2:9092][?prefix=NAME&group=GROUP&queues=a,b&partition_key=queue|id]` as
 * a KafkaBackend (openBackend, the CLI's `--db`, `CONVEYOR_DB`). The parameters are Conveyor's;
 * the brokers are the seed list. kafkajs is loaded on first use, with an error naming the package
 * when it is missing.
 */
import type { Clock } from "../../core/clock.js";
import { InvalidInputError } from "../../core/errors.js";
import { KafkaBackend, type KafkaBackendOptions } from "./backend.js";

const PARAMS = new Set(["prefix", "group", "queues", "partition_key"]);

export function openKafkaBackend(url: string, options: { clock?: Clock } = {}): KafkaBackend {
  const q = url.indexOf("?");
  const base = q < 0 ? url : url.slice(0, q);
  const params = new URLSearchParams(q < 0 ? "" : url.slice(q + 1));
  for (const name of params.keys()) {
    if (!PARAMS.has(name)) throw new InvalidInputError(`unknown parameter "${name}" in a kafka:// backend URL; known: ${[...PARAMS].join(", ")}`);
  }
  if (/^kafka:\/\/[^/]*\/./i.test(base))
    throw new InvalidInputError(
      "a kafka:// backend URL names brokers only (kafka://host:9092,host2:9092); queues become topics <prefix>.<queue>, set the prefix with ?prefix=NAME",
    );
  const partitionKey = params.get("partition_key");
  const config: KafkaBackendOptions = {
    url: base.replace(/\/$/, ""),
    ...(params.get("prefix") !== null ? { prefix: params.get("prefix")! } : {}),
    ...(params.get("group") !== null ? { groupId: params.get("group")! } : {}),
    ...(params.get("queues") !== null
      ? {
          queues: params
            .get("queues")!
            .split(",")
            .filter((x) => x !== ""),
        }
      : {}),
    ...(partitionKey !== null ? { partitionKey: partitionKey as KafkaBackendOptions["partitionKey"] } : {}),
    ...(options.clock ? { clock: options.clock } : {}),
  };
  return new KafkaBackend(config);
}
