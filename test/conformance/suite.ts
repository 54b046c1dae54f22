/**
 * The backend conformance suite: ONE set of tests every backend runs, through the `Backend`
 * interface only. Time moves with a FakeClock (never sleeps); each test gets its own store.
 *
 * Usage, in test/backends/<name>.test.ts:
 *
 *   backendSuite("sqlite file", { capabilities, make: (clock) => ..., openSecond: (clock) => ... });
 *
 * Tests that need something a backend may lack (a second connection, cross-process wake-ups,
 * transactional completion) are skipped by name with the reason in their title, never silently.
 */
import { afterEach, beforeEach, describe } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { FakeClock } from "../../src/core/clock.js";
import { adminTests } from "./admin.js";
import { checkTests } from "./checks.js";
import { claimTests } from "./claim.js";
import { dedupTests } from "./dedup.js";
import { completeAndClaimTests } from "./complete-and-claim.js";
import { enqueueTests } from "./enqueue.js";
import { cursorTests } from "./cursors.js";
import { finishedWindowTests } from "./finished-window.js";
import { flowTests } from "./flows.js";
import { flowControlTests } from "./flow-control.js";
import type { BackendFactory, SuiteContext } from "./fixtures.js";
import { leaseTests } from "./leases.js";
import { logTests } from "./logs.js";
import { eventLogTests } from "./events.js";
import { maintenanceTests } from "./maintenance.js";
import { stallBlameTests } from "./stall-blame.js";
import { miscTests } from "./misc.js";
import { scheduleTests } from "./schedules.js";
import { settleTests } from "./settle.js";
import { transactionalCompletionTests, transactionRefusalTests } from "./transactional.js";

export type { BackendFactory } from "./fixtures.js";

export function backendSuite(name: string, factory: BackendFactory): void {
  describe(`conformance: ${name}`, () => {
    let clock: FakeClock | undefined;
    let backend: Backend | undefined;
    const extra: Backend[] = [];

    beforeEach(async () => {
      clock = new FakeClock();
      backend = await factory.make(clock);
    });

    afterEach(async () => {
      const open = [...extra.splice(0), backend];
      backend = undefined;
      for (const b of open) await b?.close();
    });

    const context: SuiteContext = {
      get b() {
        if (!backend) throw new Error("no backend: the suite's beforeEach did not run or failed");
        return backend;
      },
      get clock() {
        if (!clock) throw new Error("no clock: the suite's beforeEach did not run");
        return clock;
      },
      factory,
      async second() {
        if (!factory.openSecond) throw new Error("this test needs factory.openSecond; guard it with it.skipIf");
        const b = await factory.openSecond(context.clock);
        extra.push(b);
        return b;
      },
    };

    enqueueTests(context);
    dedupTests(context);
    flowTests(context);
    claimTests(context);
    leaseTests(context);
    settleTests(context);
    logTests(context);
    eventLogTests(context);
    completeAndClaimTests(context);
    maintenanceTests(context);
    stallBlameTests(context);
    adminTests(context);
    miscTests(context);
    checkTests(context);
    flowControlTests(context);
    transactionalCompletionTests(context);
    transactionRefusalTests(context);
    scheduleTests(context);
    finishedWindowTests(context);
    cursorTests(context);
  });
}
