import { fork, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { fileURLToPath } from "node:url";
import type { JobContext } from "../core/define.js";
import { ConveyorError, JobTimeoutError, RetryLater, ShutdownError, UnrecoverableError } from "../core/errors.js";
import type { ErrorInfo, JobRecord } from "../core/job.js";
import type { Json } from "../core/json.js";
import { positiveInt } from "../core/checks.js";
import type { FromSandbox, ToSandbox } from "./sandbox-protocol.js";

export interface SandboxOptions {
  /**
   * Module whose default export maps job names to handlers (the shape `conveyor worker --handlers`
   * loads). It is imported only inside the sandbox processes.
   */
  module: string;
  /** After asking a handler to abort (lease lost, cancelled), kill its process if still busy after this long, ms. Default 1000. */
  abortGraceMs?: number;
  /**
   * Processes started ahead of jobs: once the first has loaded the module, the pool starts the
   * rest at once instead of one per job when jobs arrive (a cold start takes seconds with a
   * TypeScript module, and a job would wait for it). More start on demand when every one is busy;
   * each that dies is replaced at once. Default in a Worker: its `concurrency` + 1 (a spare for a
   * process killed mid-job); a pool made directly: 1.
   */
  processes?: number;
}

/** The sandbox process died while running a job (process.exit, a crash, out of memory). Retried. */
export class SandboxCrashError extends ConveyorError {
  override name = "SandboxCrashError";
}

const CHILD = (() => {
  const here = fileURLToPath(import.meta.url);
  const ts = here.replace(/sandbox\.[cm]?[jt]s$/, "sandbox-child.ts");
  const js = here.replace(/sandbox\.[cm]?[jt]s$/, "sandbox-child.js");
  return here.endsWith(".ts") && existsSync(ts) ? ts : js;
})();

/**
 * Node flags for the child: the parent's, plus the tsx loader when TypeScript must be loaded
 * (Conveyor running from its sources, or a .ts handlers module) and the parent got it elsewhere
 * (vitest, a programmatic register).
 */
function childExecArgv(module: string): string[] {
  const argv = [...process.execArgv];
  const needsTs = CHILD.endsWith(".ts") || /\.[cm]?ts$/.test(module);
  if (needsTs && !argv.some((a) => a.includes("tsx"))) {
    try {
      import.meta.resolve("tsx");
      argv.push("--import", "tsx");
    } catch {
      // No tsx: the child reports a load error that says the module could not be imported.
    }
  }
  return argv;
}

function revive(info: ErrorInfo, unrecoverable: boolean, retryDelayMs: number | null): Error {
  const error =
    retryDelayMs !== null ? new RetryLater(retryDelayMs, info.message) : unrecoverable ? new UnrecoverableError(info.message) : new Error(info.message);
  error.name = info.name;
  if (info.stack) error.stack = info.stack;
  return error;
}

/** One child process; runs one job at a time. */
class Sandbox {
  readonly child: ChildProcess;
  readonly ready: Promise<string[]>;
  exited = false;
  /** The handlers module loaded: this process could run jobs. */
  loaded = false;
  private onMessage: ((m: FromSandbox) => void) | null = null;
  private onExit: ((code: number | null, signal: NodeJS.Signals | null) => void) | null = null;

  constructor(module: string) {
    this.child = fork(CHILD, [module], { execArgv: childExecArgv(module), stdio: ["ignore", "inherit", "inherit", "ipc"] });
    this.ready = new Promise<string[]>((resolve, reject) => {
      this.onMessage = (m) => {
        if (m.type === "ready") resolve(m.names);
        else if (m.type === "load-error") reject(revive(m.error, true, null));
      };
      this.onExit = (code, signal) => reject(new SandboxCrashError(`sandbox exited (${signal ?? `code ${code}`}) before loading ${module}`));
    });
    this.ready.then(
      () => (this.loaded = true),
      () => {},
    );
    this.child.on("message", (m: FromSandbox) => this.onMessage?.(m));
    this.child.on("exit", (code, signal) => {
      this.exited = true;
      this.onExit?.(code, signal);
    });
    this.child.on("error", () => {});
  }

  send(message: ToSandbox): void {
    if (!this.exited && this.child.connected) this.child.send(message);
  }

  kill(): void {
    if (!this.exited) this.child.kill("SIGKILL");
  }

  run(job: JobRecord, ctx: JobContext, abortGraceMs: number): Promise<Json> {
    return new Promise<Json>((resolve, reject) => {
      let graceTimer: NodeJS.Timeout | undefined;
      const finish = () => {
        clearTimeout(graceTimer);
        ctx.signal.removeEventListener("abort", onAbort);
        this.onMessage = null;
        this.onExit = null;
      };
      const onAbort = () => {
        const reason: unknown = ctx.signal.reason;
        // A timeout or a shutdown means "stop now": the handler had its chance.
        if (reason instanceof JobTimeoutError || reason instanceof ShutdownError) {
          this.kill();
          return;
        }
        const e = reason instanceof Error ? reason : new Error(String(reason));
        this.send({ type: "abort", reason: { name: e.name, message: e.message, stack: null } });
        graceTimer = setTimeout(() => this.kill(), abortGraceMs);
      };
      this.onMessage = (m) => {
        switch (m.type) {
          case "progress":
            void ctx.progress(m.value).catch(() => {});
            break;
          case "log":
            void ctx.log(m.line);
            break;
          case "once":
            ctx.once(m.key, m.ttlMs).then(
              (value) => this.send({ type: "once-result", requestId: m.requestId, value }),
              (error: unknown) => this.send({ type: "call-error", requestId: m.requestId, message: String(error) }),
            );
            break;
          case "done":
            finish();
            resolve(m.result);
            break;
          case "failed":
            finish();
            reject(revive(m.error, m.unrecoverable, m.retryDelayMs));
            break;
        }
      };
      this.onExit = (code, signal) => {
        finish();
        reject(new SandboxCrashError(`the sandbox process running job ${job.id} exited (${signal ?? `code ${code}`}) before it finished`));
      };
      if (ctx.signal.aborted) {
        finish();
        reject(ctx.signal.reason as Error);
        return;
      }
      ctx.signal.addEventListener("abort", onAbort, { once: true });
      this.send({ type: "run", job });
    });
  }
}

/**
 * Runs handlers in child processes, one job per process at a time, at most `size` processes. A
 * process that times out, stops answering an abort, or dies is killed and replaced, so a handler
 * that blocks its event loop or calls process.exit cannot take the worker down with it.
 */
export class SandboxPool {
  private readonly idle: Sandbox[] = [];
  private readonly all = new Set<Sandbox>();
  /** Replacements still starting up, not yet given to a job. */
  private readonly warming = new Set<Sandbox>();
  private readonly module: string;
  private readonly abortGraceMs: number;
  private closed = false;
  /** Job names the module handles, from the first sandbox that loaded it. */
  readonly names: Promise<string[]>;

  constructor(options: SandboxOptions) {
    this.module = resolvePath(options.module);
    this.abortGraceMs = options.abortGraceMs ?? 1_000;
    const processes = positiveInt("sandbox option processes", options.processes ?? 1);
    const first = this.spawn();
    this.names = first.ready.then((names) => {
      this.idle.push(first);
      // Only after one loaded the module: one that cannot load it would fail in every process.
      // A job claimed before they are up takes the one closest to ready (see run()).
      for (let i = 1; i < processes && !this.closed; i++) void this.replace();
      return names;
    });
  }

  private spawn(): Sandbox {
    const sandbox = new Sandbox(this.module);
    this.all.add(sandbox);
    sandbox.child.on("exit", () => {
      this.all.delete(sandbox);
      this.warming.delete(sandbox);
      const i = this.idle.indexOf(sandbox);
      if (i >= 0) this.idle.splice(i, 1);
      // Replace a process that was killed or died (a pill's timeout, a crash) right away, so the
      // next job does not wait for a cold start. Only one that had loaded the module: one that
      // could not load it would be replaced by another that cannot, forever.
      if (sandbox.loaded && !this.closed) void this.replace();
    });
    return sandbox;
  }

  /** Starts a process that joins the idle ones once loaded; resolves then (or when it failed to load). */
  private replace(): Promise<void> {
    const fresh = this.spawn();
    this.warming.add(fresh);
    return fresh.ready.then(
      () => {
        if (this.warming.delete(fresh) && !this.closed && !fresh.exited) this.idle.push(fresh);
      },
      () => void this.warming.delete(fresh),
    );
  }

  async run(job: JobRecord, ctx: JobContext): Promise<Json> {
    if (this.closed) throw new ShutdownError();
    let sandbox = this.idle.pop();
    while (sandbox?.exited) sandbox = this.idle.pop();
    if (!sandbox) {
      // A replacement already starting up is ready sooner than a new one.
      const [warm] = this.warming;
      if (warm) {
        this.warming.delete(warm);
        sandbox = warm;
      }
    }
    sandbox ??= this.spawn();
    await sandbox.ready;
    try {
      return await sandbox.run(job, ctx, this.abortGraceMs);
    } finally {
      if (!sandbox.exited && !this.closed) this.idle.push(sandbox);
    }
  }

  /** Kills every sandbox process. */
  close(): void {
    this.closed = true;
    for (const s of this.all) s.kill();
    this.all.clear();
    this.warming.clear();
    this.idle.length = 0;
  }
}
