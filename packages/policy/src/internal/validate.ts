import type { CapacityUnit, PolicyKey } from '../types.js';

/** A short, safe rendering of any value for error messages. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 64 ? `${value.slice(0, 61)}...` : value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  if (typeof value === 'bigint') return `${value}n`;
  return Object.prototype.toString.call(value);
}

/** @throws TypeError unless `key` is a string or a finite number */
export function checkKey(key: unknown, name = 'key'): asserts key is PolicyKey {
  if (typeof key === 'string') return;
  if (typeof key === 'number' && Number.isFinite(key)) return;
  throw new TypeError(`${name} must be a string or a finite number, got ${describe(key)}`);
}

/** @throws TypeError unless a number; RangeError unless a safe integer >= `min` (and <= `max`) */
export function checkInteger(value: unknown, name: string, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number') throw new TypeError(`${name} must be a number, got ${describe(value)}`);
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `in [${min}, ${max}]`;
    throw new RangeError(`${name} must be an integer ${range}, got ${describe(value)}`);
  }
  return value;
}

/** An object size: a positive safe integer number of bytes. */
export function checkSize(size: unknown, name = 'size'): number {
  return checkInteger(size, name, 1);
}

/** @throws TypeError unless a number; RangeError unless finite and in [min, max] */
export function checkNumber(value: unknown, name: string, min: number, max: number): number {
  if (typeof value !== 'number') throw new TypeError(`${name} must be a number, got ${describe(value)}`);
  if (!Number.isFinite(value) || value < min || value > max) {
    throw new RangeError(`${name} must be a number in [${min}, ${max}], got ${describe(value)}`);
  }
  return value;
}

/** @throws TypeError unless `'bytes'` or `'objects'` (undefined means `'bytes'`) */
export function checkUnit(unit: unknown, name = 'unit'): CapacityUnit {
  if (unit === undefined || unit === 'bytes') return 'bytes';
  if (unit === 'objects') return 'objects';
  throw new TypeError(`${name} must be 'bytes' or 'objects', got ${describe(unit)}`);
}

/** @throws TypeError unless a plain options object */
export function checkOptions(options: unknown, name = 'options'): void {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError(`${name} must be an object, got ${describe(options)}`);
  }
}

/** @throws TypeError unless a function */
export function checkFunction(value: unknown, name: string): asserts value is (...args: never[]) => unknown {
  if (typeof value !== 'function') throw new TypeError(`${name} must be a function, got ${describe(value)}`);
}
