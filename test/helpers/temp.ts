import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Temporary directories for one test file: `make()` creates one under the OS temp dir,
 * `removeAll()` (call it in `afterAll`) deletes every one made so far.
 */
export class TempDirs {
  private readonly made: string[] = [];

  constructor(private readonly prefix = "conveyor-test-") {}

  /** Creates a fresh, empty directory and returns its path. */
  async make(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), this.prefix));
    this.made.push(dir);
    return dir;
  }

  /** A path for a file named `name` inside a fresh directory (the file itself is not created). */
  async file(name: string): Promise<string> {
    return join(await this.make(), name);
  }

  /** Deletes every directory made by this instance, with its contents. */
  async removeAll(): Promise<void> {
    const dirs = this.made.splice(0);
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  }
}
