/**
 * A Kafka-protocol test broker for the tests: librdkafka's mock cluster, started by Debian's `kcat`
 * (`kcat -X test.mock.num.brokers=3 -b unused:9092 -C -t keepalive`; it prints
 * `… replaced with 127.0.0.1:P1,127.0.0.1:P2,…` on stderr). It is a TEST BROKER, NOT KAFKA: it
 * keeps everything in memory and loses it when the process ends, it has no durability, no
 * replication worth the name and its own quirks (docs/kafka.md lists those met here).
 *
 * The vitest globalSetup (test/setup/kafka.ts) starts one cluster per test run for every file to
 * share (each test under its own topic and group names). Tests that kill the broker start a private
 * one here with `fixedPorts`, so a restart comes back on the same addresses (see
 * kafka-fixed-ports.c: the mock otherwise picks new ports every time).
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./ports.js";

const DEFAULT_KCAT = "/usr/bin/kcat";
const SHIM_SOURCE = fileURLToPath(new URL("./kafka-fixed-ports.c", import.meta.url));

/** Path of `kcat`, or null when none is installed. `KCAT` overrides. */
export function findKcat(): string | null {
  const given = process.env.KCAT;
  if (given) return existsSync(given) ? given : null;
  return existsSync(DEFAULT_KCAT) ? DEFAULT_KCAT : null;
}

export interface MockKafkaOptions {
  /** Mock brokers in the cluster. Default 3. */
  brokers?: number;
  /** Keep the brokers' ports across kill() / start() (compiles and preloads the bind shim). Default false. */
  fixedPorts?: boolean;
  /** How long to wait for the cluster's address line, in ms. Default 15000. */
  bootTimeoutMs?: number;
}

export interface MockKafkaCluster {
  /** `host:port` of every mock broker. */
  readonly brokers: string[];
  /** `kafka://host:port,host:port,…`: what `conveyor relay --target` and the transport take. */
  readonly url: string;
  /** SIGKILLs the kcat process: the cluster and everything in it are gone at once. */
  kill(): Promise<void>;
  /** Starts a new, empty cluster (on the same ports with `fixedPorts`). */
  start(): Promise<void>;
  /** Kills it and removes its temp files. Safe to call twice. */
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** Starts a mock cluster; resolves once it printed its bootstrap servers. */
export async function startMockKafka(options: MockKafkaOptions = {}): Promise<MockKafkaCluster> {
  const kcat = findKcat();
  if (kcat === null) throw new Error(`no kcat found at ${DEFAULT_KCAT}: install it (apt-get install kcat) or point KAFKA_URL at a broker you provide`);
  const brokerCount = options.brokers ?? 3;
  const bootTimeoutMs = options.bootTimeoutMs ?? 15_000;
  const dir = await mkdtemp(join(tmpdir(), "conveyor-kafka-"));
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (options.fixedPorts) {
    const shim = join(dir, "fixed-ports.so");
    execFileSync("cc", ["-shared", "-fPIC", "-O2", "-o", shim, SHIM_SOURCE, "-ldl"], { stdio: "pipe" });
    const ports: number[] = [];
    while (ports.length < brokerCount) {
      const port = await freePort();
      if (!ports.includes(port)) ports.push(port);
    }
    env.LD_PRELOAD = shim;
    env.CONVEYOR_KAFKA_MOCK_PORTS = ports.join(",");
  }
  let child: ChildProcess | null = null;
  let brokers: string[] = [];

  const start = async () => {
    const proc = spawn(kcat, ["-X", `test.mock.num.brokers=${brokerCount}`, "-b", "unused:9092", "-C", "-t", "conveyor-keepalive", "-q"], {
      env,
      stdio: ["ignore", "ignore", "pipe"],
    });
    child = proc;
    running.add(proc);
    proc.once("exit", () => running.delete(proc));
    // A test run killed hard skips every teardown: a detached shell kills kcat once we are gone.
    spawn("sh", ["-c", `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${proc.pid} 2>/dev/null; do sleep 1; done; kill -9 ${proc.pid} 2>/dev/null`], {
      detached: true,
      stdio: "ignore",
    }).unref();
    let stderr = "";
    const found = await new Promise<string[] | Error>((resolve) => {
      const timer = setTimeout(() => resolve(new Error(`kcat printed no mock cluster address within ${bootTimeoutMs} ms`)), bootTimeoutMs);
      proc.stderr?.on("data", (d: Buffer) => {
        stderr = (stderr + d.toString()).slice(-8_000);
        const match = /replaced with (\S+)/.exec(stderr);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]!.split(","));
        }
      });
      proc.once("exit", (code, signal) => {
        clearTimeout(timer);
        resolve(new Error(`kcat exited (${signal ?? code}) before the mock cluster was up`));
      });
    });
    if (found instanceof Error) {
      proc.kill("SIGKILL");
      throw new Error(`${found.message}\nstderr:\n${stderr}`);
    }
    // Keep draining stderr so kcat never blocks on a full pipe.
    proc.stderr?.resume();
    if (brokers.length > 0 && found.join(",") !== brokers.join(",")) {
      proc.kill("SIGKILL");
      throw new Error(`the restarted mock cluster is on ${found.join(",")}, not ${brokers.join(",")}: start it with fixedPorts`);
    }
    brokers = found;
  };

  const kill = async () => {
    const proc = child;
    child = null;
    if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
    proc.kill("SIGKILL");
    await exited;
  };

  try {
    await start();
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  let stopped = false;
  return {
    get brokers() {
      return brokers.slice();
    },
    get url() {
      return `kafka://${brokers.join(",")}`;
    },
    kill,
    start,
    async stop() {
      if (stopped) return;
      stopped = true;
      await kill();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The `host:port` list of a `kafka://` URL. */
export function kafkaBrokers(url: string): string[] {
  return url
    .replace(/^kafka:\/\//, "")
    .split("/")[0]!
    .split(",");
}

/** A topic or group name no other test uses. */
export function kafkaName(label = "t"): string {
  return `cvt-${label}-${randomBytes(5).toString("hex")}`;
}

/** The shared cluster's URL, or a failure saying why there is none (see test/setup/kafka.ts). */
export function requireKafka(url: string, unavailable: string): string {
  if (!url) throw new Error(unavailable || "no Kafka test broker: set KAFKA_URL or install kcat");
  return url;
}

/** One record as kcat (librdkafka, another client than the one under test) reads it back. */
export interface KcatRecord {
  partition: number;
  offset: number;
  key: string | null;
  payload: string | null;
  headers: Record<string, string>;
}

/** Every record of `topic` from the beginning, read by `kcat -C -e -J` (exits at the end of each partition). */
export async function readTopic(url: string, topic: string): Promise<KcatRecord[]> {
  const kcat = findKcat();
  if (kcat === null) throw new Error("no kcat to read the topic with");
  const out = await new Promise<string>((resolve, reject) => {
    const proc = spawn(kcat, ["-b", kafkaBrokers(url).join(","), "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q"], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    proc.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    proc.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => proc.kill("SIGKILL"), 20_000);
    proc.once("exit", (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(stdout);
      else reject(new Error(`kcat -C -t ${topic} exited ${code}: ${stderr.slice(-2_000)}`));
    });
  });
  return out
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => {
      const r = JSON.parse(line) as { partition: number; offset: number; key: string | null; payload: string | null; headers?: string[] };
      const headers: Record<string, string> = {};
      for (let i = 0; i + 1 < (r.headers?.length ?? 0); i += 2) headers[r.headers![i]!] = r.headers![i + 1]!;
      return { partition: r.partition, offset: r.offset, key: r.key, payload: r.payload, headers };
    });
}
