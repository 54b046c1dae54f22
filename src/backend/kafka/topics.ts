/**
 * Topic names of the Kafka backend. Every Conveyor queue is three topics:
 * `<prefix>.<queue>` (jobs), `<prefix>.<queue>.retry` (retry copies and delayed jobs, held until
 * due) and `<prefix>.<queue>.dead` (dead letters with their forensics, and the replay/remove
 * markers of the dead-letter view).
 *
 * Kafka topic names allow only `[a-zA-Z0-9._-]`, and `.` separates the parts here, while a queue
 * name may hold `.`, `:` and `/`: every character of a queue outside `[a-zA-Z0-9-]` is written
 * `_xx` (its code in hex), so two queues never share a topic and a queue named `a.retry` is not
 * the retry topic of `a`.
 */
import { InvalidInputError } from "../../core/errors.js";
import { shown } from "../../core/checks.js";

/** What kind of topic a queue's topic is. */
export type TopicKind = "work" | "retry" | "dead";

export class TopicNames {
  constructor(readonly prefix: string) {}

  work(queue: string): string {
    return `${this.prefix}.${encodeQueue(queue)}`;
  }

  retry(queue: string): string {
    return `${this.work(queue)}.retry`;
  }

  dead(queue: string): string {
    return `${this.work(queue)}.dead`;
  }

  /** The queue and kind a topic of this prefix belongs to, or null for another topic. */
  parse(topic: string): { queue: string; kind: TopicKind } | null {
    const head = `${this.prefix}.`;
    if (!topic.startsWith(head)) return null;
    const [encoded, suffix, ...more] = topic.slice(head.length).split(".");
    if (encoded === undefined || more.length > 0) return null;
    const kind: TopicKind | null = suffix === undefined ? "work" : suffix === "retry" ? "retry" : suffix === "dead" ? "dead" : null;
    if (kind === null) return null;
    return { queue: decodeQueue(encoded), kind };
  }
}

/** Checks a topic prefix: 1-64 of `[a-zA-Z0-9_-]`. */
export function checkTopicPrefix(prefix: unknown): string {
  if (typeof prefix !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(prefix)) {
    throw new InvalidInputError(`the Kafka backend's prefix must be 1-64 characters of letters, digits, _ and -; got ${shown(prefix)}`);
  }
  return prefix;
}

function encodeQueue(queue: string): string {
  return queue.replace(/[^A-Za-z0-9-]/g, (ch) => `_${ch.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

function decodeQueue(encoded: string): string {
  return encoded.replace(/_([0-9a-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}
