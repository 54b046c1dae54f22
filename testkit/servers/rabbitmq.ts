/**
 * RabbitMQ for tests: a throwaway `rabbitmq-server` node, uniquely named, on free ports, with
 * every file it writes (Mnesia database, logs, config, Erlang cookie, its own epmd) in one temp
 * directory, so several test runs on one machine never meet and the machine's own RabbitMQ
 * (/var/lib/rabbitmq, /etc/rabbitmq) is never read or touched.
 *
 * RabbitMQ takes seconds to boot: the vitest globalSetup (test/setup/rabbitmq.ts) starts one per
 * test run for every file to share (each test under its own queue and exchange names). Tests that
 * stop or kill their broker start a private one here.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { signalAndWait } from "./child.js";
import { freePort } from "./ports.js";
import type { CrashableServer } from "./server.js";

/** The server start script of the Debian package (the /usr/sbin wrapper would switch to the rabbitmq user). */
const DEFAULT_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const EPMD = "/usr/lib/erlang/bin/epmd";
const CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl";

export interface RabbitServerOptions {
  /** Extra lines for rabbitmq.conf (new-style `key = value`). */
  config?: string[];
  /** How long to wait for the broker to accept AMQP, in ms. Default 120000. */
  bootTimeoutMs?: number;
}

/**
 * A broker at `amqp://guest:guest@127.0.0.1:PORT/`. kill() loses in-flight unconfirmed messages;
 * start() resolves once AMQP answers; stop() also stops its epmd.
 */
export interface ThrowawayRabbit extends CrashableServer {
  /** `name@localhost`: unique per server. */
  readonly nodeName: string;
  /** Temp directory holding everything the node writes. */
  readonly dir: string;
  /** Runs `rabbitmqctl ARGS` against this node (its cookie and epmd); resolves with stdout. */
  ctl(args: string[]): Promise<string>;
}

/** Path of the rabbitmq-server start script, or null when none is installed. `RABBITMQ_SERVER` overrides. */
export function findRabbitServer(): string | null {
  const given = process.env.RABBITMQ_SERVER;
  if (given) return existsSync(given) ? given : null;
  return existsSync(DEFAULT_SERVER) ? DEFAULT_SERVER : null;
}

/** Brokers still running: killed when the test process exits without stopping them. */
const running = new Map<ChildProcess, () => void>();
process.once("exit", () => {
  for (const [child, cleanup] of running) {
    killGroup(child, "SIGKILL");
    cleanup();
  }
});

/** Signals the broker's whole process group (start script, Erlang VM and its helpers; not epmd). */
function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

/** Starts a broker; resolves once it accepts AMQP connections. */
export async function startThrowawayRabbit(options: RabbitServerOptions = {}): Promise<ThrowawayRabbit> {
  const binary = findRabbitServer();
  if (binary === null) {
    throw new Error(
      `no rabbitmq-server found at ${DEFAULT_SERVER}: install it (apt-get install rabbitmq-server) or point RABBITMQ_URL ` + `at a broker you provide`,
    );
  }
  const dir = await mkdtemp(join(tmpdir(), "conveyor-rabbit-"));
  const home = join(dir, "home");
  await mkdir(home, { recursive: true });
  // The cookie authenticates CLI tools to the node; a fresh one, readable by its owner only.
  await writeFile(join(home, ".erlang.cookie"), randomBytes(20).toString("hex").toUpperCase(), { mode: 0o400 });
  const nodeName = `conveyor-${randomBytes(4).toString("hex")}@localhost`;
  const [port, distPort, epmdPort] = [await freePort(), await freePort(), await freePort()];
  const confFile = join(dir, "rabbitmq.conf");
  await writeFile(
    confFile,
    [
      "listeners.tcp.default = " + `127.0.0.1:${port}`,
      "loopback_users = none",
      // The machine's free disk is shared with everything else; do not block publishers over it.
      "disk_free_limit.absolute = 50MB",
      "log.console = false",
      "log.file.level = warning",
      ...(options.config ?? []),
      "",
    ].join("\n"),
  );
  await writeFile(join(dir, "enabled_plugins"), "[].\n");
  await writeFile(join(dir, "rabbitmq-env.conf"), "");
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    HOME: home,
    RABBITMQ_NODENAME: nodeName,
    RABBITMQ_USE_LONGNAME: "false",
    RABBITMQ_NODE_IP_ADDRESS: "127.0.0.1",
    RABBITMQ_NODE_PORT: String(port),
    RABBITMQ_DIST_PORT: String(distPort),
    RABBITMQ_MNESIA_BASE: join(dir, "mnesia"),
    RABBITMQ_LOG_BASE: join(dir, "log"),
    RABBITMQ_CONFIG_FILE: confFile,
    RABBITMQ_ADVANCED_CONFIG_FILE: join(dir, "advanced.config"),
    RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, "enabled_plugins"),
    RABBITMQ_CONF_ENV_FILE: join(dir, "rabbitmq-env.conf"),
    RABBITMQ_PID_FILE: join(dir, "rabbit.pid"),
    // A private epmd, so stopping this node never disturbs another test run's (or the system's).
    ERL_EPMD_PORT: String(epmdPort),
    ERL_EPMD_ADDRESS: "127.0.0.1",
  };
  const bootTimeoutMs = options.bootTimeoutMs ?? 120_000;
  let child: ChildProcess | null = null;
  const stopEpmd = () => {
    try {
      spawn(EPMD, ["-port", String(epmdPort), "-kill"], { env, stdio: "ignore" }).unref();
    } catch {
      // epmd already gone
    }
  };

  const start = async () => {
    // Its own process group: the start script runs the Erlang VM as a child (forwarding SIGTERM
    // to a graceful stop), so a SIGKILL must reach the whole group, not only the script.
    const proc = spawn(binary, [], { env, stdio: ["ignore", "ignore", "pipe"], cwd: dir, detached: true });
    child = proc;
    running.set(proc, stopEpmd);
    proc.once("exit", () => running.delete(proc));
    let stderr = "";
    proc.stderr?.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4_000);
    });
    const exited = new Promise<string>((resolve) => {
      proc.once("exit", (code, signal) => resolve(`rabbitmq-server exited (${signal ?? code})`));
      proc.once("error", (error) => resolve(`rabbitmq-server did not start: ${error.message}`));
    });
    const ready = waitForAmqp(port, bootTimeoutMs).then(
      () => null,
      (error: Error) => error.message,
    );
    const failure = await Promise.race([ready, exited]);
    if (failure !== null) {
      killGroup(proc, "SIGKILL");
      const log = await readFile(join(dir, "log", `${nodeName}.log`), "utf8").catch(() => "");
      throw new Error(`${failure}${stderr ? `\nstderr:\n${stderr}` : ""}${log ? `\nlog:\n${log.slice(-3_000)}` : ""}`);
    }
  };

  // A process that kills this test run hard (CI timeout) skips every teardown: a detached shell
  // watches this process and, once it is gone, kills the broker and its epmd and removes the dir.
  const watchdog = spawn(
    "sh",
    [
      "-c",
      `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ` +
        `[ -f '${join(dir, "rabbit.pid")}' ] && kill -9 "$(cat '${join(dir, "rabbit.pid")}')" 2>/dev/null; sleep 1; ` +
        `ERL_EPMD_PORT=${epmdPort} ${EPMD} -kill >/dev/null 2>&1; rm -rf '${dir}'`,
    ],
    { detached: true, stdio: "ignore" },
  );
  watchdog.unref();

  try {
    await start();
  } catch (error) {
    stopEpmd();
    watchdog.kill();
    await rm(dir, { recursive: true, force: true });
    throw error;
  }

  const waitExit = async (signal: NodeJS.Signals) => {
    const proc = child;
    child = null;
    // SIGKILL reaches the whole group (the VM too); a graceful stop that hangs (a stuck quorum
    // queue) turns forceful.
    await signalAndWait(proc, signal, { send: (p, s) => (s === "SIGKILL" ? killGroup(p, s) : void p.kill(s)), forceAfterMs: 30_000 });
  };
  let stopped = false;
  return {
    url: `amqp://guest:guest@127.0.0.1:${port}/`,
    port,
    nodeName,
    dir,
    kill: () => waitExit("SIGKILL"),
    terminate: () => waitExit("SIGTERM"),
    start,
    ctl: (args) =>
      new Promise<string>((resolve, reject) => {
        const proc = spawn(CTL, ["-n", nodeName, ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
        let out = "";
        let err = "";
        proc.stdout.on("data", (d: Buffer) => (out += d.toString()));
        proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
        proc.once("error", reject);
        proc.once("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`rabbitmqctl ${args.join(" ")} exited ${code}: ${err.slice(-2_000)}`))));
      }),
    async stop() {
      if (stopped) return;
      stopped = true;
      await waitExit("SIGTERM");
      stopEpmd();
      watchdog.kill();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Resolves once a broker on 127.0.0.1:`port` answers the AMQP 0-9-1 protocol header with its
 * Connection.Start method frame; rejects after `timeoutMs`. Needs no client library.
 */
export async function waitForAmqp(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await answersAmqp(port)) return;
    if (Date.now() > deadline) throw new Error(`no AMQP broker answered on port ${port} within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function answersAmqp(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(2_000, () => done(false));
    socket.once("error", () => done(false));
    socket.on("connect", () => socket.write(Buffer.from([0x41, 0x4d, 0x51, 0x50, 0, 0, 9, 1])));
    // Frame type 1 (method) on channel 0: Connection.Start.
    socket.once("data", (data: Buffer) => done(data[0] === 1 && data[1] === 0 && data[2] === 0));
  });
}

/** A queue / exchange name no other test uses. */
export function rabbitName(label = "t"): string {
  return `cvt-${label}-${randomBytes(5).toString("hex")}`;
}

/** The shared broker's URL, or a failure saying why there is none (see test/setup/rabbitmq.ts). */
export function requireRabbit(url: string, unavailable: string): string {
  if (!url) throw new Error(unavailable || "no RabbitMQ for the tests: set RABBITMQ_URL");
  return url;
}

/**
 * Deletes every RabbitMQ queue a Conveyor AMQP backend declared for the queues it knows, so the
 * shared broker does not accumulate quorum queues (each one a Raft group) over a test run.
 */
export async function deleteBackendQueues(url: string, backend: { knownQueues: string[]; brokerQueues(queue: string): string[] }): Promise<void> {
  const { connect: connectAmqp } = await import("amqplib");
  const connection = await connectAmqp(url);
  try {
    const channel = await connection.createChannel();
    for (const queue of backend.knownQueues) for (const name of backend.brokerQueues(queue)) await channel.deleteQueue(name);
  } finally {
    await connection.close();
  }
}
