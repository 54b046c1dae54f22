/**
 * Shared by the pack test and the README quick-start test: the package as a user gets it.
 *
 * `packFromCleanClone` copies the repository's tracked (and new, not ignored) files into a temp
 * folder with no dist/, as a fresh clone has, and runs `npm pack` there, so `prepack` must build
 * everything the tarball needs. Commands run with the Node that runs the tests first on PATH, so
 * the same test checks Node 24 and (from .ci/run) Node 22.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { cpSync, mkdirSync, readFileSync, symlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { ROOT } from "../helpers/cli.js";

export { ROOT };

/** The environment for commands: this test's Node first on PATH, nothing from the repo's npm run. */
export function userEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    // npm run / vitest leave npm_* and INIT_CWD behind; a user's shell has none of them.
    // npm_config_nodedir stays: it points node-gyp at this Node's headers.
    if ((key.startsWith("npm_") && key !== "npm_config_nodedir") || key === "INIT_CWD" || key === "NODE_OPTIONS") continue;
    env[key] = value;
  }
  env.PATH = `${dirname(process.execPath)}:${process.env.PATH ?? ""}`;
  env.npm_config_audit = "false";
  env.npm_config_fund = "false";
  env.npm_config_update_notifier = "false";
  // The registry is the only source, and the cache usually holds every package already.
  env.npm_config_prefer_offline = "true";
  return { ...env, ...extra };
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end; never throws on a non-zero exit (the caller asserts). */
export function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = userEnv(), timeoutMs = 120_000): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(command, args, { cwd, env, timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Like `run`, but a non-zero exit throws with everything the command printed. */
export async function must(command: string, args: string[], cwd: string, env?: NodeJS.ProcessEnv, timeoutMs?: number): Promise<RunResult> {
  const result = await run(command, args, cwd, env, timeoutMs);
  if (result.code !== 0) {
    throw new Error(`${command} ${args.join(" ")} (in ${cwd}) exited ${result.code}\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`);
  }
  return result;
}

export function spawnIn(command: string, args: string[], cwd: string): { child: ChildProcess; output: () => string; exited: Promise<number | string> } {
  const child = spawn(command, args, { cwd, env: userEnv(), stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | string>((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal ?? -1)));
  return { child, output: () => output, exited };
}

export interface Packed {
  /** Absolute path of the .tgz. */
  tarball: string;
  /** Paths inside the package, as `npm pack --json` lists them. */
  files: string[];
  version: string;
}

/** Copies the working tree minus ignored files (so: no dist/, no node_modules) and packs it. */
export async function packFromCleanClone(workDir: string): Promise<Packed> {
  const clone = join(workDir, "clone");
  mkdirSync(clone);
  const listed = await must("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT);
  for (const path of listed.stdout.split("\0").filter(Boolean)) {
    try {
      cpSync(join(ROOT, path), join(clone, path), { recursive: false });
    } catch (error) {
      // A file deleted in the working tree but still in the index: a clone would not have it either.
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    }
  }
  // The build needs TypeScript; the installed tree is the same one `npm ci` would give.
  symlinkSync(join(ROOT, "node_modules"), join(clone, "node_modules"), "dir");
  const out = join(workDir, "out");
  mkdirSync(out);
  const packed = await must("npm", ["pack", "--json", "--pack-destination", out], clone);
  // prepack's output goes to stderr: stdout is the JSON report alone.
  const [info] = JSON.parse(packed.stdout) as Array<{ filename: string; version: string; files: Array<{ path: string }> }>;
  return { tarball: join(out, info!.filename), files: info!.files.map((f) => f.path), version: info!.version };
}

/** The exact version of a devDependency, so the user's install hits the npm cache. */
export function devVersion(name: string): string {
  const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { devDependencies: Record<string, string> };
  const version = pkg.devDependencies[name];
  if (!version) throw new Error(`${name} is not a devDependency of the repository`);
  return `${name}@${version}`;
}
