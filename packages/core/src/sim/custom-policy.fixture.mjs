// A module that registers a custom policy, as a user's would: sweep.test.ts loads it into sweep workers
// (runSweep's policyModules, `tiersync sim --policy-module`).
import { LruPolicy, registerPolicy } from '@tiersync/policy';

registerPolicy('test-module-lru', (options) => new LruPolicy(options));
