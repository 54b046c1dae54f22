import { fileURLToPath } from "node:url";
import ts from "typescript";
import { defineConfig } from "vitest/config";

// Tests import the examples, which import the package by name: resolve those names to the sources
// as tsconfig.json "paths" do for tsc and tsx (no build needed).
const paths = (
  ts.readConfigFile(fileURLToPath(new URL("./tsconfig.json", import.meta.url)), (path) => ts.sys.readFile(path)).config as {
    compilerOptions: { paths: Record<string, string[]> };
  }
).compilerOptions.paths;
const packageNames = Object.entries(paths).map(([name, [target]]) => ({
  find: new RegExp(`^${name.replace(/[/-]/g, "\\$&")}$`),
  replacement: fileURLToPath(new URL(target!, import.meta.url)),
}));

export default defineConfig({
  resolve: { alias: packageNames },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Files run in two parallel forks (vitest's default on two cores is one: cores - 1). Most of
    // the suite waits on servers, child processes and timers, not on the CPU, so two at a time
    // shortens it; each test file uses its own database, prefix or vhost names, and the tests
    // that kill or pause a server start a private one.
    pool: "forks",
    maxWorkers: 2,
    // Start throwaway servers unless DATABASE_URL / REDIS_URL name them; tests get the URLs via inject().
    globalSetup: ["test/setup/postgres.ts", "test/setup/redis.ts", "test/setup/rabbitmq.ts", "test/setup/kafka.ts"],
  },
});
