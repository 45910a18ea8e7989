"""Built-in tasks, used when no dataset is configured or it cannot be loaded (e.g. offline).

Each task puts a few files into the agent's workspace and asks a question a terminal can
answer; the env asks the agent to write the answer into answer.txt and to reply with it.
``answer`` is the reference the reward compares with. ``solution`` (a command that solves the
task) and ``gold_answer`` (a correct reply) are the task's gold solution: the tests replay it
to show that the reward pays for solving the task, and only for that.
"""

SAMPLES = [
    {
        "prompt": "How many lines does numbers.txt have?",
        "files": {"numbers.txt": "4\n8\n15\n16\n23\n42\n"},
        "answer": "6",
        "solution": "wc -l < numbers.txt | tee answer.txt",
        "gold_answer": "numbers.txt has 6 lines.",
    },
    {
        "prompt": "What is the sum of the numbers in numbers.txt?",
        "files": {"numbers.txt": "4\n8\n15\n16\n23\n42\n"},
        "answer": "108",
        "solution": "awk '{s += $1} END {print s}' numbers.txt | tee answer.txt",
        "gold_answer": "The sum is 108.",
    },
    {
        "prompt": "What is the largest number in numbers.txt?",
        "files": {"numbers.txt": "17\n3\n99\n42\n7\n"},
        "answer": "99",
        "solution": "sort -n numbers.txt | tail -n 1 | tee answer.txt",
        "gold_answer": "The largest number is 99.",
    },
    {
        "prompt": "How many words are in poem.txt?",
        "files": {
            "poem.txt": "The fog comes\non little cat feet.\nIt sits looking\nover harbor and city\n"
        },
        "answer": "14",
        "solution": "wc -w < poem.txt | tee answer.txt",
        "gold_answer": "poem.txt has 14 words.",
    },
    {
        "prompt": "How many lines of app.log contain the word ERROR?",
        "files": {
            "app.log": "INFO start\nERROR disk full\nWARN slow\nERROR timeout\nINFO done\nERROR retry failed\n"
        },
        "answer": "3",
        "solution": "grep -c ERROR app.log | tee answer.txt",
        "gold_answer": "3 lines contain ERROR.",
    },
    {
        "prompt": "Which IP address appears most often in access.log?",
        "files": {
            "access.log": "10.0.0.1 GET /\n10.0.0.2 GET /a\n10.0.0.1 GET /b\n10.0.0.3 GET /\n10.0.0.1 POST /c\n10.0.0.2 GET /\n"
        },
        "answer": "10.0.0.1",
        "solution": "cut -d' ' -f1 access.log | sort | uniq -c | sort -rn | head -n1 | awk '{print $2}' | tee answer.txt",
        "gold_answer": "The most frequent IP is 10.0.0.1.",
    },
    {
        "prompt": "How many distinct names are in names.txt?",
        "files": {"names.txt": "alice\nbob\nalice\ncarol\ndave\nbob\n"},
        "answer": "4",
        "solution": "sort -u names.txt | wc -l | tee answer.txt",
        "gold_answer": "There are 4 distinct names.",
    },
    {
        "prompt": "Which name in names.txt comes first alphabetically?",
        "files": {"names.txt": "mallory\ntrent\nerin\nvictor\npeggy\n"},
        "answer": "erin",
        "solution": "sort names.txt | head -n1 | tee answer.txt",
        "gold_answer": "erin comes first.",
    },
    {
        "prompt": "How many .py files are there under the project directory?",
        "files": {
            "project/app.py": "print('app')\n",
            "project/lib/util.py": "X = 1\n",
            "project/lib/README.md": "docs\n",
            "project/tests/test_app.py": "def test(): pass\n",
            "project/setup.cfg": "[x]\n",
        },
        "answer": "3",
        "solution": "find project -name '*.py' | wc -l | tee answer.txt",
        "gold_answer": "There are 3 Python files.",
    },
    {
        "prompt": "How many bytes is report.txt?",
        "files": {"report.txt": "quarterly report\nrevenue up\n"},
        "answer": "28",
        "solution": "wc -c < report.txt | tee answer.txt",
        "gold_answer": "report.txt is 28 bytes.",
    },
    {
        "prompt": "What is the value of the version field in config.json?",
        "files": {"config.json": '{"name": "demo", "version": "2.4.1", "debug": false}\n'},
        "answer": "2.4.1",
        "solution": "python3 -c \"import json; print(json.load(open('config.json'))['version'])\" | tee answer.txt",
        "gold_answer": "The version is 2.4.1.",
    },
    {
        "prompt": "How many data rows (not counting the header) does table.csv have?",
        "files": {"table.csv": "id,item,amount\n1,apple,3\n2,pear,5\n3,plum,11\n4,fig,2\n"},
        "answer": "4",
        "solution": "tail -n +2 table.csv | wc -l | tee answer.txt",
        "gold_answer": "table.csv has 4 data rows.",
    },
    {
        "prompt": "What is the sum of the amount column in table.csv?",
        "files": {"table.csv": "id,item,amount\n1,apple,3\n2,pear,5\n3,plum,11\n4,fig,2\n"},
        "answer": "21",
        "solution": "tail -n +2 table.csv | awk -F, '{s += $3} END {print s}' | tee answer.txt",
        "gold_answer": "The amounts add up to 21.",
    },
    {
        "prompt": "On which line number of main.py is the TODO comment?",
        "files": {
            "main.py": "import sys\n\n\ndef main():\n    # TODO: parse arguments\n    return 0\n"
        },
        "answer": "5",
        "solution": "grep -n TODO main.py | cut -d: -f1 | tee answer.txt",
        "gold_answer": "The TODO is on line 5.",
    },
    {
        "prompt": "What is the word in word.txt spelled backwards?",
        "files": {"word.txt": "stressed\n"},
        "answer": "desserts",
        "solution": "rev word.txt | tee answer.txt",
        "gold_answer": "Backwards it is desserts.",
    },
    {
        "prompt": "What is the content of greeting.txt in upper case?",
        "files": {"greeting.txt": "hello world\n"},
        "answer": "HELLO WORLD",
        "solution": "tr a-z A-Z < greeting.txt | tee answer.txt",
        "gold_answer": "In upper case: HELLO WORLD.",
    },
    {
        "prompt": "How many lines in lines.txt are longer than 10 characters?",
        "files": {"lines.txt": "short\na much longer line\ntiny\nanother long line here\nok\n"},
        "answer": "2",
        "solution": "awk 'length > 10' lines.txt | wc -l | tee answer.txt",
        "gold_answer": "2 lines are longer than 10 characters.",
    },
    {
        "prompt": "What are the first 8 hex digits of the SHA-256 of secret.txt?",
        "files": {"secret.txt": "open sesame\n"},
        "answer": "7bb8fff5",
        "solution": "sha256sum secret.txt | cut -c1-8 | tee answer.txt",
        "gold_answer": "They are 7bb8fff5.",
    },
    {
        "prompt": "How many characters long is the token in token.txt (without the newline)?",
        "files": {"token.txt": "a8f3k2m9q1z7\n"},
        "answer": "12",
        "solution": "tr -d '\\n' < token.txt | wc -c | tee answer.txt",
        "gold_answer": "The token has 12 characters.",
    },
    {
        "prompt": "Which file extension appears most often in files.txt?",
        "files": {"files.txt": "a.txt\nb.csv\nc.txt\nd.json\ne.txt\nf.csv\n"},
        "answer": "txt",
        "solution": "sed 's/.*\\.//' files.txt | sort | uniq -c | sort -rn | head -n1 | awk '{print $2}' | tee answer.txt",
        "gold_answer": "The most common extension is txt.",
    },
    {
        "prompt": "Which user in users.txt has the uid 1001?",
        "files": {
            "users.txt": "root:x:0:0\nalice:x:1000:1000\nbob:x:1001:1001\ncarol:x:1002:1002\n"
        },
        "answer": "bob",
        "solution": "awk -F: '$3 == 1001 {print $1}' users.txt | tee answer.txt",
        "gold_answer": "The user is bob.",
    },
    {
        "prompt": "What port is set in server.conf?",
        "files": {"server.conf": "# server settings\nhost = 0.0.0.0\nport = 8443\nworkers = 4\n"},
        "answer": "8443",
        "solution": "grep '^port' server.conf | awk -F'= ' '{print $2}' | tee answer.txt",
        "gold_answer": "The port is 8443.",
    },
    {
        "prompt": "How many empty lines does notes.txt have?",
        "files": {"notes.txt": "first\n\nsecond\n\n\nthird\n"},
        "answer": "3",
        "solution": "grep -c '^$' notes.txt | tee answer.txt",
        "gold_answer": "notes.txt has 3 empty lines.",
    },
    {
        "prompt": "How many days are there from the first date to the second date in dates.txt?",
        "files": {"dates.txt": "2024-01-15\n2024-03-01\n"},
        "answer": "46",
        "solution": "python3 -c \"import datetime as d; a, b = [d.date.fromisoformat(x) for x in open('dates.txt').read().split()]; print((b - a).days)\" | tee answer.txt",
        "gold_answer": "There are 46 days between them.",
    },
]
