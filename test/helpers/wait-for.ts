/** The tests use the same `waitFor` users get from `conveyor-jobs/testing`: one copy. */
export { waitFor, type WaitForOptions } from "../../src/testing/index.js";
