/**
 * Wake-ups of the SQLite backend. Within a process, a commit that makes jobs claimable calls the
 * listeners directly ({@link SqliteWakeups.announce}). Across processes, such a commit also bumps
 * its queue's `wake` counter (queue-signal.sql); a process with listeners watches the file's
 * directory and, when another connection has committed (PRAGMA data_version), wakes exactly the
 * queues whose counter moved.
 */
import { watch, type FSWatcher } from "node:fs";
import { basename, dirname } from "node:path";
import type { WakeListener } from "../contract.js";
import { WakeListeners } from "../listeners.js";
import type { Statements } from "./statements.js";

/** Queue name -> its wake counter after a commit (see the queues table). */
export type WakeMarks = Map<string, number>;

/**
 * After the WAL file changes, when to look (ms after the change) whether another connection
 * committed. A writer appends its frames, then publishes the commit in the shared-memory index,
 * which raises no file event; the later looks catch a writer that was descheduled in between.
 */
const WAKE_CHECK_DELAYS_MS = [1, 15, 100] as const;

export class SqliteWakeups {
  private readonly listeners = new WakeListeners({ start: () => this.startWatcher(), stop: () => this.stopWatcher() });
  private watcher: FSWatcher | null = null;
  private wakeCheckTimer: NodeJS.Timeout | null = null;
  private wakeCheckDueAt = 0;
  private lookSoonPending = false;
  /** `PRAGMA data_version` when the watcher last looked. */
  private seenDataVersion = 0;
  /** Each queue's wake counter as last seen, so only queues whose counter moved are woken. */
  private seenWakeMarks: WakeMarks = new Map();
  private closed = false;

  /**
   * @param file absolute path of the database file
   * @param watchWal whether to watch it for other processes' commits (never for `:memory:`)
   */
  constructor(
    private readonly file: string,
    private readonly watchWal: boolean,
    private readonly s: Pick<Statements, "dataVersion" | "wakeCounters">,
  ) {}

  subscribe(listener: WakeListener): () => void {
    return this.listeners.add(listener);
  }

  /** Drops every listener and the watch, before the database closes. */
  close(): void {
    this.closed = true;
    this.listeners.clear();
    this.stopWatcher();
  }

  /**
   * After a commit that bumped wake counters: wakes this process's listeners directly, and
   * records the counters as seen so the watcher does not report this process's own commit again.
   */
  announce(marks: WakeMarks): void {
    for (const [queue, mark] of marks) {
      if (this.watcher !== null && mark > (this.seenWakeMarks.get(queue) ?? 0)) this.seenWakeMarks.set(queue, mark);
      // Calls every listener; a throwing listener must not break the caller or the others.
      this.listeners.wake(queue);
    }
  }

  /**
   * Watches the database's directory, not its `-wal` file: SQLite deletes and recreates the WAL
   * (last connection closing, checkpoints with truncate), which would silently orphan a watch
   * on the file itself.
   */
  private startWatcher(): void {
    if (!this.watchWal || this.watcher !== null || this.closed) return;
    const walName = `${basename(this.file)}-wal`;
    try {
      this.seenDataVersion = this.s.dataVersion.get()!;
      this.seenWakeMarks = new Map(this.s.wakeCounters.all().map((row) => [row.name, row.wake]));
      const watcher = watch(dirname(this.file), { persistent: false }, (_event, filename) => {
        if (filename !== null && filename !== walName) return;
        this.lookSoon();
        this.scheduleWakeCheck(0);
      });
      watcher.on("error", () => this.stopWatcher());
      watcher.unref();
      this.watcher = watcher;
    } catch {
      // No watch (inotify limits, exotic file systems): workers still find jobs by polling.
      this.watcher = null;
    }
  }

  /**
   * A look as soon as this process's event loop is free. By the time the file event has reached
   * this process, the commit that raised it is usually published: this look finds it without
   * waiting for the first timer (which Node fires no sooner than 1 ms later).
   */
  private lookSoon(): void {
    if (this.lookSoonPending) return;
    this.lookSoonPending = true;
    setImmediate(() => {
      this.lookSoonPending = false;
      if (this.watcher === null) return;
      for (const queue of this.movedQueues()) this.listeners.wake(queue);
    }).unref();
  }

  private stopWatcher(): void {
    if (this.wakeCheckTimer !== null) clearTimeout(this.wakeCheckTimer);
    this.wakeCheckTimer = null;
    const watcher = this.watcher;
    this.watcher = null;
    watcher?.close();
  }

  /**
   * Every WAL write raises file events, this process's own included, several per commit, and
   * most are claims, settles and heartbeats that wake nobody. `PRAGMA data_version` changes only
   * when ANOTHER connection committed; only then are the queues' wake counters read, and only
   * the queues whose counter moved are woken. Each burst of events is followed by the whole
   * ladder of looks, because the commit that raised the last event may become visible after an
   * earlier look already found (another) commit.
   */
  private scheduleWakeCheck(step: number): void {
    const delay = WAKE_CHECK_DELAYS_MS[step];
    if (delay === undefined || this.watcher === null) return;
    const dueAt = Date.now() + delay;
    if (this.wakeCheckTimer !== null) {
      // A look is already coming; only pull it forward, so a steady stream of events cannot
      // postpone it forever.
      if (this.wakeCheckDueAt <= dueAt) return;
      clearTimeout(this.wakeCheckTimer);
    }
    this.wakeCheckDueAt = dueAt;
    this.wakeCheckTimer = setTimeout(() => {
      this.wakeCheckTimer = null;
      const moved = this.movedQueues();
      this.scheduleWakeCheck(step + 1);
      for (const queue of moved) this.listeners.wake(queue);
    }, delay);
    this.wakeCheckTimer.unref();
  }

  /** Queues whose wake counter moved since the last look, if another connection committed. */
  private movedQueues(): string[] {
    const moved: string[] = [];
    try {
      const version = this.s.dataVersion.get()!;
      if (version === this.seenDataVersion) return moved;
      this.seenDataVersion = version;
      for (const { name, wake } of this.s.wakeCounters.all()) {
        if (wake !== this.seenWakeMarks.get(name)) {
          this.seenWakeMarks.set(name, wake);
          moved.push(name);
        }
      }
    } catch {
      // Closed meanwhile: nothing to wake. Polling covers whatever a look misses.
    }
    return moved;
  }
}
