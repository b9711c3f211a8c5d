import { describeChainWrapper } from '../test-chain-wrappers.js';
import { PrefixHoldPolicy } from './prefix-hold.js';

describeChainWrapper('PrefixHoldPolicy (holding variant)', 'prefix-hold', PrefixHoldPolicy);
