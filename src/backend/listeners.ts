/**
 * The wake-up listener registry every backend keeps (`Backend.subscribe`): one copy of the rules
 * instead of one per store. A listener is called for each wake-up; one that throws (or returns a
 * promise that rejects) is skipped with a process warning and never breaks the caller or the
 * other listeners. The store starts its wake-up source (file watch, LISTEN connection, pub/sub
 * subscriber) when a listener subscribes and stops it when the last one leaves.
 */
import type { WakeListener } from "./contract.js";

export interface WakeSource {
  /** Called at every subscribe; starting a source that already runs must do nothing. */
  start(): void;
  /** Called when the last listener leaves. */
  stop(): void;
}

export class WakeListeners {
  // An entry per subscribe call, so the same function subscribed twice is called twice and
  // unsubscribing one leaves the other.
  private readonly entries = new Set<{ listener: WakeListener }>();

  constructor(private readonly source: WakeSource) {}

  get size(): number {
    return this.entries.size;
  }

  /** Registers `listener`; returns the function that removes it (calling that twice is harmless). */
  add(listener: WakeListener): () => void {
    const entry = { listener };
    this.entries.add(entry);
    this.source.start();
    return () => {
      if (!this.entries.delete(entry)) return;
      if (this.entries.size === 0) this.source.stop();
    };
  }

  /** Calls every listener with `queue`. */
  wake(queue: string): void {
    for (const { listener } of [...this.entries]) {
      try {
        const returned: unknown = listener(queue);
        if (returned instanceof Promise) returned.catch((error: unknown) => warnListenerFailed(error));
      } catch (error) {
        warnListenerFailed(error);
      }
    }
  }

  /** Forgets every listener without stopping the source (the store is closing it). */
  clear(): void {
    this.entries.clear();
  }
}

function warnListenerFailed(error: unknown): void {
  process.emitWarning(`a Conveyor wake-up listener threw; it was skipped: ${String(error)}`, "ConveyorWarning");
}
