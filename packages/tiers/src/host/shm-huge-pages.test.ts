import { describe, expect, it } from 'vitest';
import { shmHugePages } from './shm-huge-pages.js';

const MOUNTS = [
  '/dev/root / ext4 rw,relatime 0 0',
  'tmpfs /dev/shm tmpfs rw,relatime,size=24683664k 0 0',
  'tmpfs /run tmpfs rw,nosuid,nodev,huge=within_size,size=100k 0 0',
].join('\n');
const ADVISE_DEFAULT = 'always within_size advise [never] deny force';

describe('shmHugePages', () => {
  it("reads the file's mount: no huge= option is never, so madvise gets 4 KiB pages", () => {
    expect(shmHugePages('/dev/shm/tiersync-a', MOUNTS, ADVISE_DEFAULT)).toEqual({ mount: '/dev/shm', huge: 'never', shmemEnabled: 'never', allowed: false });
  });

  it('allows them on a mount with huge=advise (the last line for a remounted point counts), within_size or always', () => {
    const remounted = `${MOUNTS}\ntmpfs /dev/shm tmpfs rw,relatime,size=24683664k,huge=advise 0 0`;
    expect(shmHugePages('/dev/shm/x', remounted, ADVISE_DEFAULT)).toMatchObject({ huge: 'advise', allowed: true });
    expect(shmHugePages('/run/x', MOUNTS, ADVISE_DEFAULT)).toMatchObject({ mount: '/run', huge: 'within_size', allowed: true });
  });

  it("follows shmem_enabled's force and deny over the mount", () => {
    expect(shmHugePages('/dev/shm/x', MOUNTS, 'always within_size advise never deny [force]')?.allowed).toBe(true);
    expect(shmHugePages('/run/x', MOUNTS, 'always within_size advise never [deny] force')?.allowed).toBe(false);
  });

  it('falls back to the root mount and says nothing without a mount table', () => {
    expect(shmHugePages('/var/tmp/x', MOUNTS, ADVISE_DEFAULT)).toMatchObject({ mount: '/', huge: 'never' });
    expect(shmHugePages('/dev/shm/x', '', ADVISE_DEFAULT)).toBeUndefined();
  });
});
