import { fileURLToPath } from "node:url";
import ts from "typescript";
import { defineConfig } from "vitest/config";

// Tests import the examples, which import the package by name: resolve those names to the sources
// as tsconfig.json "paths" do for tsc and tsx (no build needed).
const paths = (ts.readConfigFile(fileURLToPath(new URL("./tsconfig.json", import.meta.url)), (path) => ts.sys.readFile(path)).config as { compilerOptions: { paths: Record<string, string[]> } }).compilerOptions.paths;
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
    // Two cores: files run in parallel forks; each test file uses its own database.
    pool: "forks",
    // Start throwaway servers unless DATABASE_URL / REDIS_URL name them; tests get the URLs via inject().
    globalSetup: ["test/setup/postgres.ts", "test/setup/redis.ts", "test/setup/rabbitmq.ts", "test/setup/kafka.ts"],
  },
});
