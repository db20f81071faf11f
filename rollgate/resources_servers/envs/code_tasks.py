"""The `code` environment's task bank: small classic functions, each with visible examples (shown
to the model), hidden tests in groups (used by verify only), a gold solution that passes all of
them and a plausible wrong solution that fails some (both used by tests, never shown).
A test is (call expression, expected value as a Python literal)."""

from __future__ import annotations

from dataclasses import dataclass

Test = tuple[str, str]


@dataclass(frozen=True)
class CodeTask:
    id: str
    signature: str
    doc: str
    visible: list[Test]
    hidden: dict[str, list[Test]]
    gold: str
    wrong: str

    @property
    def function_name(self) -> str:
        return self.signature.split("def ", 1)[1].split("(", 1)[0].strip()


def _t(
    id: str, signature: str, doc: str, visible: list[Test], basic: list[Test], edge: list[Test], gold: str, wrong: str
) -> CodeTask:
    return CodeTask(
        id, signature, doc, visible, {"basic": basic, "edge": edge}, gold.strip() + "\n", wrong.strip() + "\n"
    )


TASKS: list[CodeTask] = [
    _t(
        "fizzbuzz",
        "def fizzbuzz(n: int) -> list[str]:",
        "Return the FizzBuzz strings for 1..n: 'Fizz' for multiples of 3, 'Buzz' for multiples of 5, "
        "'FizzBuzz' for both, else the number as a string.",
        [("fizzbuzz(3)", "['1', '2', 'Fizz']")],
        [
            ("fizzbuzz(5)", "['1', '2', 'Fizz', '4', 'Buzz']"),
            ("fizzbuzz(15)[-1]", "'FizzBuzz'"),
            ("len(fizzbuzz(30))", "30"),
        ],
        [("fizzbuzz(0)", "[]"), ("fizzbuzz(1)", "['1']"), ("fizzbuzz(45)[44]", "'FizzBuzz'")],
        """
def fizzbuzz(n):
    out = []
    for i in range(1, n + 1):
        s = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
        out.append(s or str(i))
    return out
""",
        """
def fizzbuzz(n):
    out = []
    for i in range(1, n + 1):
        if i % 3 == 0:
            out.append("Fizz")
        elif i % 5 == 0:
            out.append("Buzz")
        else:
            out.append(str(i))
    return out
""",
    ),
    _t(
        "is_palindrome",
        "def is_palindrome(s: str) -> bool:",
        "Whether s reads the same backwards, ignoring case and every character that is not a letter or digit.",
        [("is_palindrome('Racecar')", "True")],
        [
            ("is_palindrome('hello')", "False"),
            ("is_palindrome('A man, a plan, a canal: Panama')", "True"),
            ("is_palindrome('No lemon, no melon')", "True"),
        ],
        [("is_palindrome('')", "True"), ("is_palindrome('.,!')", "True"), ("is_palindrome('ab2a')", "False")],
        """
def is_palindrome(s):
    t = [c.lower() for c in s if c.isalnum()]
    return t == t[::-1]
""",
        """
def is_palindrome(s):
    t = s.lower()
    return t == t[::-1]
""",
    ),
    _t(
        "reverse_words",
        "def reverse_words(s: str) -> str:",
        "Reverse the order of the words in s; words are separated by runs of whitespace, and the result "
        "joins them with single spaces, without leading or trailing spaces.",
        [("reverse_words('hello world')", "'world hello'")],
        [("reverse_words('a b c')", "'c b a'"), ("reverse_words('one')", "'one'")],
        [("reverse_words('  lots   of  space ')", "'space of lots'"), ("reverse_words('')", "''")],
        """
def reverse_words(s):
    return " ".join(reversed(s.split()))
""",
        """
def reverse_words(s):
    return " ".join(reversed(s.split(" ")))
""",
    ),
    _t(
        "two_sum",
        "def two_sum(nums: list[int], target: int) -> list[int]:",
        "Return [i, j] with i < j and nums[i] + nums[j] == target, choosing the smallest j and then the "
        "smallest i; return [] when no pair exists.",
        [("two_sum([2, 7, 11, 15], 9)", "[0, 1]")],
        [("two_sum([3, 2, 4], 6)", "[1, 2]"), ("two_sum([1, 5, 3, 7], 10)", "[2, 3]")],
        [("two_sum([3, 3], 6)", "[0, 1]"), ("two_sum([1, 2], 7)", "[]"), ("two_sum([], 0)", "[]")],
        """
def two_sum(nums, target):
    seen = {}
    for j, x in enumerate(nums):
        if target - x in seen:
            return [seen[target - x], j]
        seen.setdefault(x, j)
    return []
""",
        """
def two_sum(nums, target):
    seen = {}
    for j, x in enumerate(nums):
        seen[x] = j
        if target - x in seen and seen[target - x] != j:
            return [seen[target - x], j]
    return []
""",
    ),
    _t(
        "fibonacci",
        "def fibonacci(n: int) -> int:",
        "The n-th Fibonacci number; the sequence starts 0, 1, 1, 2, 3, 5 for n = 0, 1, 2, ... n can be up to 1000.",
        [("fibonacci(10)", "55")],
        [("fibonacci(1)", "1"), ("fibonacci(2)", "1"), ("fibonacci(20)", "6765")],
        [("fibonacci(0)", "0"), ("fibonacci(90)", "2880067194370816120"), ("fibonacci(300) % 1000000007", "644264086")],
        """
def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
""",
        """
def fibonacci(n):
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)
""",
    ),
    _t(
        "is_prime",
        "def is_prime(n: int) -> bool:",
        "Whether n is a prime number (n may be negative, zero or large).",
        [("is_prime(7)", "True")],
        [("is_prime(4)", "False"), ("is_prime(97)", "True"), ("is_prime(91)", "False")],
        [("is_prime(1)", "False"), ("is_prime(2)", "True"), ("is_prime(-7)", "False"), ("is_prime(1000003)", "True")],
        """
def is_prime(n):
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True
""",
        """
def is_prime(n):
    if n < 2:
        return False
    for i in range(2, int(n ** 0.5)):
        if n % i == 0:
            return False
    return True
""",
    ),
    _t(
        "gcd",
        "def gcd(a: int, b: int) -> int:",
        "The greatest common divisor of a and b; never negative, and 0 when both are 0.",
        [("gcd(12, 18)", "6")],
        [("gcd(17, 5)", "1"), ("gcd(100, 75)", "25")],
        [("gcd(0, 9)", "9"), ("gcd(0, 0)", "0"), ("gcd(-12, 18)", "6")],
        """
def gcd(a, b):
    a, b = abs(a), abs(b)
    while b:
        a, b = b, a % b
    return a
""",
        """
def gcd(a, b):
    for d in range(min(a, b), 0, -1):
        if a % d == 0 and b % d == 0:
            return d
    return 1
""",
    ),
    _t(
        "flatten",
        "def flatten(nested: list) -> list:",
        "Flatten arbitrarily nested lists into one list, keeping the order of the elements.",
        [("flatten([1, [2, [3]], 4])", "[1, 2, 3, 4]")],
        [("flatten([[1, 2], [3]])", "[1, 2, 3]"), ("flatten(['a', ['b']])", "['a', 'b']")],
        [("flatten([])", "[]"), ("flatten([[[[]]]])", "[]"), ("flatten([1, [2, [3, [4, [5]]]]])", "[1, 2, 3, 4, 5]")],
        """
def flatten(nested):
    out = []
    for x in nested:
        if isinstance(x, list):
            out.extend(flatten(x))
        else:
            out.append(x)
    return out
""",
        """
def flatten(nested):
    out = []
    for x in nested:
        if isinstance(x, list):
            out.extend(x)
        else:
            out.append(x)
    return out
""",
    ),
    _t(
        "count_vowels",
        "def count_vowels(s: str) -> int:",
        "How many vowels (a, e, i, o, u, in either case) s contains.",
        [("count_vowels('hello')", "2")],
        [("count_vowels('rhythm')", "0"), ("count_vowels('Programming')", "3")],
        [("count_vowels('AEIOU aeiou')", "10"), ("count_vowels('')", "0")],
        """
def count_vowels(s):
    return sum(c in "aeiouAEIOU" for c in s)
""",
        """
def count_vowels(s):
    return sum(c in "aeiou" for c in s)
""",
    ),
    _t(
        "roman_to_int",
        "def roman_to_int(s: str) -> int:",
        "Convert a Roman numeral (I, V, X, L, C, D, M with subtractive pairs such as IV, XC) to an integer.",
        [("roman_to_int('XIV')", "14")],
        [("roman_to_int('III')", "3"), ("roman_to_int('LVIII')", "58")],
        [("roman_to_int('MCMXCIV')", "1994"), ("roman_to_int('IX')", "9"), ("roman_to_int('MMMCMXCIX')", "3999")],
        """
def roman_to_int(s):
    v = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    for i, c in enumerate(s):
        if i + 1 < len(s) and v[c] < v[s[i + 1]]:
            total -= v[c]
        else:
            total += v[c]
    return total
""",
        """
def roman_to_int(s):
    v = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    prev = 0
    for c in s:
        if v[c] > prev and prev:
            total += v[c] - prev
        else:
            total += v[c]
        prev = v[c]
    return total
""",
    ),
    _t(
        "int_to_roman",
        "def int_to_roman(n: int) -> str:",
        "Convert 1 <= n <= 3999 to a Roman numeral using subtractive notation (4 is 'IV', 90 is 'XC').",
        [("int_to_roman(14)", "'XIV'")],
        [("int_to_roman(3)", "'III'"), ("int_to_roman(58)", "'LVIII'")],
        [("int_to_roman(1994)", "'MCMXCIV'"), ("int_to_roman(3999)", "'MMMCMXCIX'"), ("int_to_roman(40)", "'XL'")],
        """
def int_to_roman(n):
    table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
             (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = []
    for value, sym in table:
        while n >= value:
            out.append(sym)
            n -= value
    return "".join(out)
""",
        """
def int_to_roman(n):
    table = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = []
    for value, sym in table:
        while n >= value:
            out.append(sym)
            n -= value
    return "".join(out)
""",
    ),
    _t(
        "balanced_brackets",
        "def balanced_brackets(s: str) -> bool:",
        "Whether the brackets (), [] and {} in s are balanced and properly nested; other characters are ignored.",
        [("balanced_brackets('([]{})')", "True")],
        [("balanced_brackets('(]')", "False"), ("balanced_brackets('a(b[c]d)e')", "True")],
        [
            ("balanced_brackets('')", "True"),
            ("balanced_brackets('((')", "False"),
            ("balanced_brackets('([)]')", "False"),
            ("balanced_brackets('}{')", "False"),
        ],
        """
def balanced_brackets(s):
    pairs = {")": "(", "]": "[", "}": "{"}
    stack = []
    for c in s:
        if c in "([{":
            stack.append(c)
        elif c in pairs:
            if not stack or stack.pop() != pairs[c]:
                return False
    return not stack
""",
        """
def balanced_brackets(s):
    return all(s.count(a) == s.count(b) for a, b in ("()", "[]", "{}"))
""",
    ),
    _t(
        "merge_intervals",
        "def merge_intervals(intervals: list[list[int]]) -> list[list[int]]:",
        "Merge overlapping (or touching) closed intervals [start, end]; return them sorted by start.",
        [("merge_intervals([[1, 3], [2, 6], [8, 10]])", "[[1, 6], [8, 10]]")],
        [("merge_intervals([[1, 4], [4, 5]])", "[[1, 5]]"), ("merge_intervals([[5, 6], [1, 2]])", "[[1, 2], [5, 6]]")],
        [("merge_intervals([])", "[]"), ("merge_intervals([[1, 10], [2, 3], [4, 5]])", "[[1, 10]]")],
        """
def merge_intervals(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out
""",
        """
def merge_intervals(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = end
        else:
            out.append([start, end])
    return out
""",
    ),
    _t(
        "run_length_encode",
        "def run_length_encode(s: str) -> str:",
        "Run-length encode s as each character followed by the length of its run: 'aaab' -> 'a3b1'.",
        [("run_length_encode('aaab')", "'a3b1'")],
        [("run_length_encode('abc')", "'a1b1c1'"), ("run_length_encode('zzzzzz')", "'z6'")],
        [
            ("run_length_encode('')", "''"),
            ("run_length_encode('aaaaaaaaaaaab')", "'a12b1'"),
            ("run_length_encode('abba')", "'a1b2a1'"),
        ],
        """
def run_length_encode(s):
    out = []
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        out.append(f"{s[i]}{j - i}")
        i = j
    return "".join(out)
""",
        """
def run_length_encode(s):
    out = []
    for c in dict.fromkeys(s):
        out.append(f"{c}{s.count(c)}")
    return "".join(out)
""",
    ),
    _t(
        "is_anagram",
        "def is_anagram(a: str, b: str) -> bool:",
        "Whether a and b are anagrams of each other, ignoring case and spaces.",
        [("is_anagram('listen', 'silent')", "True")],
        [("is_anagram('hello', 'world')", "False"), ("is_anagram('Dormitory', 'dirty room')", "True")],
        [("is_anagram('aab', 'abb')", "False"), ("is_anagram('', '')", "True")],
        """
def is_anagram(a, b):
    norm = lambda s: sorted(s.replace(" ", "").lower())
    return norm(a) == norm(b)
""",
        """
def is_anagram(a, b):
    norm = lambda s: set(s.replace(" ", "").lower())
    return norm(a) == norm(b)
""",
    ),
    _t(
        "max_subarray",
        "def max_subarray(nums: list[int]) -> int:",
        "The largest sum of a non-empty contiguous subarray of nums (nums is non-empty).",
        [("max_subarray([-2, 1, -3, 4, -1, 2, 1, -5, 4])", "6")],
        [("max_subarray([1, 2, 3])", "6"), ("max_subarray([5, -9, 6])", "6")],
        [("max_subarray([-3, -1, -2])", "-1"), ("max_subarray([7])", "7")],
        """
def max_subarray(nums):
    best = cur = nums[0]
    for x in nums[1:]:
        cur = max(x, cur + x)
        best = max(best, cur)
    return best
""",
        """
def max_subarray(nums):
    best = cur = 0
    for x in nums:
        cur = max(0, cur + x)
        best = max(best, cur)
    return best
""",
    ),
    _t(
        "binary_search",
        "def binary_search(nums: list[int], target: int) -> int:",
        "The index of target in the sorted list nums (any index if it occurs more than once), or -1.",
        [("binary_search([1, 3, 5, 7], 5)", "2")],
        [("binary_search([1, 3, 5, 7], 4)", "-1"), ("binary_search([2, 4, 6, 8, 10], 10)", "4")],
        [("binary_search([], 1)", "-1"), ("binary_search([1], 1)", "0"), ("binary_search([1, 3], 1)", "0")],
        """
def binary_search(nums, target):
    lo, hi = 0, len(nums) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if nums[mid] == target:
            return mid
        if nums[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1
""",
        """
def binary_search(nums, target):
    lo, hi = 0, len(nums) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if nums[mid] == target:
            return mid
        if nums[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1
""",
    ),
    _t(
        "second_largest",
        "def second_largest(nums: list[int]) -> int | None:",
        "The second largest distinct value in nums, or None when there are fewer than two distinct values.",
        [("second_largest([3, 1, 4, 1, 5])", "4")],
        [("second_largest([10, 20])", "10"), ("second_largest([-1, -5, -3])", "-3")],
        [("second_largest([7, 7, 7])", "None"), ("second_largest([])", "None"), ("second_largest([5, 5, 4])", "4")],
        """
def second_largest(nums):
    values = sorted(set(nums))
    return values[-2] if len(values) >= 2 else None
""",
        """
def second_largest(nums):
    values = sorted(nums)
    return values[-2] if len(values) >= 2 else None
""",
    ),
    _t(
        "word_frequencies",
        "def word_frequencies(text: str) -> dict[str, int]:",
        "Count the words of text, case-insensitively; a word is a maximal run of ASCII letters or apostrophes.",
        [("word_frequencies('the cat and the hat')", "{'the': 2, 'cat': 1, 'and': 1, 'hat': 1}")],
        [("word_frequencies('Go go GO')", "{'go': 3}"), ("word_frequencies('one, two; two!')", "{'one': 1, 'two': 2}")],
        [("word_frequencies('')", "{}"), ("word_frequencies(\"it's 2 o'clock\")", '{"it\'s": 1, "o\'clock": 1}')],
        """
import re

def word_frequencies(text):
    counts = {}
    for w in re.findall(r"[A-Za-z']+", text.lower()):
        counts[w] = counts.get(w, 0) + 1
    return counts
""",
        """
def word_frequencies(text):
    counts = {}
    for w in text.lower().split():
        counts[w] = counts.get(w, 0) + 1
    return counts
""",
    ),
    _t(
        "rotate_list",
        "def rotate_list(nums: list, k: int) -> list:",
        "Rotate nums to the right by k steps (k >= 0, possibly larger than the length); return a new list.",
        [("rotate_list([1, 2, 3, 4, 5], 2)", "[4, 5, 1, 2, 3]")],
        [("rotate_list([1, 2, 3], 1)", "[3, 1, 2]"), ("rotate_list(['a', 'b'], 0)", "['a', 'b']")],
        [("rotate_list([1, 2, 3], 5)", "[2, 3, 1]"), ("rotate_list([], 3)", "[]")],
        """
def rotate_list(nums, k):
    if not nums:
        return []
    k %= len(nums)
    return nums[-k:] + nums[:-k] if k else list(nums)
""",
        """
def rotate_list(nums, k):
    if k == 0:
        return list(nums)
    return nums[-k:] + nums[:-k]
""",
    ),
    _t(
        "caesar_cipher",
        "def caesar_cipher(s: str, shift: int) -> str:",
        "Shift every ASCII letter of s by `shift` places in the alphabet (wrapping, keeping case); "
        "other characters are unchanged. shift may be negative or larger than 26.",
        [("caesar_cipher('abc', 1)", "'bcd'")],
        [("caesar_cipher('xyz', 3)", "'abc'"), ("caesar_cipher('Hello, World!', 5)", "'Mjqqt, Btwqi!'")],
        [("caesar_cipher('abc', -1)", "'zab'"), ("caesar_cipher('Zz', 52)", "'Zz'")],
        """
def caesar_cipher(s, shift):
    out = []
    for c in s:
        if "a" <= c <= "z":
            out.append(chr((ord(c) - 97 + shift) % 26 + 97))
        elif "A" <= c <= "Z":
            out.append(chr((ord(c) - 65 + shift) % 26 + 65))
        else:
            out.append(c)
    return "".join(out)
""",
        """
def caesar_cipher(s, shift):
    out = []
    for c in s:
        if c.isalpha():
            base = 97 if c.islower() else 65
            out.append(chr((ord(c) - base + shift) % 26 + base))
        else:
            out.append(c)
    return "".join(out).lower()
""",
    ),
    _t(
        "digit_sum",
        "def digit_sum(n: int) -> int:",
        "The sum of the decimal digits of n (the sign is ignored).",
        [("digit_sum(123)", "6")],
        [("digit_sum(9999)", "36"), ("digit_sum(1000)", "1")],
        [("digit_sum(0)", "0"), ("digit_sum(-47)", "11")],
        """
def digit_sum(n):
    return sum(int(d) for d in str(abs(n)))
""",
        """
def digit_sum(n):
    total = 0
    while n > 0:
        total += n % 10
        n //= 10
    return total
""",
    ),
    _t(
        "pascal_row",
        "def pascal_row(n: int) -> list[int]:",
        "Row n of Pascal's triangle (row 0 is [1]).",
        [("pascal_row(3)", "[1, 3, 3, 1]")],
        [("pascal_row(1)", "[1, 1]"), ("pascal_row(4)", "[1, 4, 6, 4, 1]")],
        [("pascal_row(0)", "[1]"), ("pascal_row(10)[5]", "252")],
        """
def pascal_row(n):
    row = [1]
    for _ in range(n):
        row = [1] + [a + b for a, b in zip(row, row[1:])] + [1]
    return row
""",
        """
def pascal_row(n):
    row = [1, 1]
    for _ in range(n - 1):
        row = [1] + [a + b for a, b in zip(row, row[1:])] + [1]
    return row
""",
    ),
    _t(
        "longest_common_prefix",
        "def longest_common_prefix(words: list[str]) -> str:",
        "The longest string that is a prefix of every word ('' for an empty list).",
        [("longest_common_prefix(['flower', 'flow', 'flight'])", "'fl'")],
        [
            ("longest_common_prefix(['dog', 'racecar'])", "''"),
            ("longest_common_prefix(['same', 'same'])", "'same'"),
            ("longest_common_prefix(['abXd', 'abYd'])", "'ab'"),
        ],
        [
            ("longest_common_prefix([])", "''"),
            ("longest_common_prefix(['abc', 'ab'])", "'ab'"),
            ("longest_common_prefix(['solo'])", "'solo'"),
        ],
        """
def longest_common_prefix(words):
    if not words:
        return ""
    prefix = words[0]
    for w in words[1:]:
        while not w.startswith(prefix):
            prefix = prefix[:-1]
    return prefix
""",
        """
def longest_common_prefix(words):
    if not words:
        return ""
    prefix = ""
    for chars in zip(*words):
        if len(set(chars)) == 1:
            prefix += chars[0]
    return prefix
""",
    ),
    _t(
        "chunk",
        "def chunk(items: list, size: int) -> list[list]:",
        "Split items into consecutive chunks of `size` elements (the last may be shorter). size >= 1.",
        [("chunk([1, 2, 3, 4, 5], 2)", "[[1, 2], [3, 4], [5]]")],
        [("chunk([1, 2, 3], 3)", "[[1, 2, 3]]"), ("chunk(['a', 'b', 'c', 'd'], 1)", "[['a'], ['b'], ['c'], ['d']]")],
        [("chunk([], 4)", "[]"), ("chunk([1, 2], 5)", "[[1, 2]]")],
        """
def chunk(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]
""",
        """
def chunk(items, size):
    return [items[i:i + size] for i in range(0, len(items) - size + 1, size)] or [items]
""",
    ),
    _t(
        "unique_in_order",
        "def unique_in_order(items: list) -> list:",
        "Remove consecutive duplicates, keeping the first of each run: [1, 1, 2, 1] -> [1, 2, 1].",
        [("unique_in_order([1, 1, 2, 1])", "[1, 2, 1]")],
        [
            ("unique_in_order(list('AAAABBBCCDAABBB'))", "['A', 'B', 'C', 'D', 'A', 'B']"),
            ("unique_in_order([1, 2, 3])", "[1, 2, 3]"),
        ],
        [("unique_in_order([])", "[]"), ("unique_in_order([None, None, 0, 0])", "[None, 0]")],
        """
def unique_in_order(items):
    out = []
    for x in items:
        if not out or out[-1] != x:
            out.append(x)
    return out
""",
        """
def unique_in_order(items):
    out = []
    for x in items:
        if x not in out:
            out.append(x)
    return out
""",
    ),
]

BY_ID: dict[str, CodeTask] = {t.id: t for t in TASKS}
