export interface SystemPackage { apt: string; why: string; present: () => boolean }
export const SYSTEM_PACKAGES: SystemPackage[];
export function missingSystemPackages(): SystemPackage[];
export function requireTools(tools: string[]): void;
export const DEBIAN_PYTHON: string;
export function requirePythonModules(modules: string[]): void;
