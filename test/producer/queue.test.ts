import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Queue, type Backend } from "../../src/index.js";
import { createTestBackend } from "../../src/testing/index.js";

let backend: Backend;
beforeEach(() => {
  backend = createTestBackend();
});
afterEach(() => backend.close());

describe("Queue", () => {
  it("getJob, cancel and replay act only on the queue's own jobs (issue 11)", async () => {
    const mine = new Queue("mine", { backend });
    const theirs = new Queue("theirs", { backend });
    const { id } = await theirs.add("job", { n: 1 }, { delayMs: 60_000 });
    expect(await mine.getJob(id)).toBeNull();
    expect(await mine.cancel(id)).toBe("not-found");
    expect(await mine.replay(id)).toBe("not-found");
    expect((await theirs.getJob(id))?.state).toBe("scheduled");
    expect(await theirs.cancel(id)).toBe("cancelled");
  });
});
