// Runs only the package tests (the pack test and the README quick start), without the throwaway
// PostgreSQL and Redis servers the rest of the suite starts: `.ci/run` uses it to run them again
// under Node 22, the oldest supported line.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/package/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 240_000,
    pool: "forks",
  },
});
