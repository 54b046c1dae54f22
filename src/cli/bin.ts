#!/usr/bin/env node
import { main } from "./main.js";

/**
 * Runs the CLI and exits with its code. Output is flushed by exiting naturally; the unref'd timer
 * only catches a handle someone forgot to close, so a finished command can never hang.
 */
export async function runCli(argv: string[]): Promise<void> {
  let code: number;
  try {
    code = await main(argv);
  } catch (error) {
    console.error(error);
    code = 1;
  }
  process.exitCode = code;
  setTimeout(() => process.exit(code), 2_000).unref();
}

await runCli(process.argv.slice(2));
