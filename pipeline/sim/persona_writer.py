"""The simulator's answer to the `persona_expand` task: a new persona from the prompt text alone.

It reads the category and the target `dimension: level` lines, picks a topic, and writes one
profile post per target whose situation implies that level (with the cue words the planner's
lexicon looks for), plus the explicit preference statements, worded differently from the
posts. Same request, same persona; different seeds or targets, a different person.
"""

from __future__ import annotations

import json
import random
import re

TARGET = re.compile(r"^\s*(\w+):\s*(\w+)", re.MULTILINE)

TOPICS = {
    "Art_and_Entertainment": [
        "watercolour",
        "jazz piano",
        "stand-up comedy",
        "film photography",
        "pottery",
        "salsa dancing",
        "short fiction",
        "classic cinema",
        "street murals",
        "choir singing",
        "indie game design",
        "podcasting",
        "printmaking",
        "community theatre",
    ],
    "Lifestyle_and_Personal_Development": [
        "meal prep",
        "running",
        "saving money",
        "sleep habits",
        "decluttering",
        "learning Spanish",
        "meditation",
        "strength training",
        "slow travel",
        "job interviews",
        "houseplants",
        "morning routines",
        "journaling",
        "public speaking",
    ],
    "Society_and_Culture": [
        "local history",
        "my new country's customs",
        "wedding traditions",
        "volunteering",
        "religious holidays",
        "spotting fake news",
        "my heritage language",
        "community organising",
        "office etiquette",
        "funeral customs",
        "street festivals",
        "family genealogy",
        "civic debates",
        "food traditions",
    ],
}
ROLES = {
    "Art_and_Entertainment": ["hobby artist", "music lover", "film buff", "amateur performer"],
    "Lifestyle_and_Personal_Development": ["self-improver", "busy parent", "career changer"],
    "Society_and_Culture": ["community member", "newcomer", "culture enthusiast"],
}
ASKS = [
    "Where would you start with {t}?",
    "What's a sensible weekly routine for {t}?",
    "How do I choose my first gear or materials for {t}?",
    "How do people get honest feedback on their {t}?",
    "Which early mistakes with {t} should I watch out for?",
    "Is there an order in which to learn {t}?",
    "How can I find other people into {t} around here?",
    "What does progress in {t} usually look like after a year?",
    "Are there good books, channels or classes on {t}?",
    "How do I keep going with {t} when motivation dips?",
]
PLACES = {
    "north_american": ["Ohio", "Toronto", "Texas", "Vancouver"],
    "european": ["Lyon", "Leeds", "Kraków", "Porto"],
    "south_asian": ["Pune", "Lahore", "Dhaka", "Kandy"],
    "east_asian": ["Osaka", "Busan", "Taipei", "Chengdu"],
    "latin_american": ["Medellín", "Guadalajara", "Recife", "Valparaíso"],
    "african": ["Nairobi", "Accra", "Lagos", "Durban"],
}
REGIONS = {
    "north_american": "North America",
    "european": "Europe",
    "south_asian": "South Asia",
    "east_asian": "East Asia",
    "latin_american": "Latin America",
    "african": "Africa",
}
PLACE_CUES = [
    "Here in {p}, things work a bit differently.",
    "Most guides are written for somewhere else, not {p}.",
    "Local shops in {p} rarely stock what the videos use.",
]
# level -> (first-person situations that imply it, the explicit statement)
LEVELS: dict[str, tuple[list[str], str]] = {
    "novice": (
        [
            "I'm a total beginner and half the words in guides mean nothing to me.",
            "Never done this before, so I have no idea what the jargon means.",
            "I'm new to all of this.",
        ],
        "Explain things simply, as if I know nothing yet.",
    ),
    "intermediate": (
        [
            "I've got the basics down after a year or so.",
            "I can manage the fundamentals but I've plateaued.",
            "Past the starter stage now, stuck somewhere in the middle.",
        ],
        "Skip the primer and show me the next level.",
    ),
    "expert": (
        [
            "I've worked with this professionally for years of my life.",
            "After years of doing this seriously, beginner advice is noise to me.",
            "I teach this, so I'm after the technical edge cases.",
        ],
        "Use proper technical vocabulary and skip the basics.",
    ),
    "brief": (
        [
            "Last answer I got was too long, I gave up halfway.",
            "Honestly just tell me the one thing that matters.",
            "I only skim, so long replies are lost on me.",
        ],
        "Keep replies to a few lines.",
    ),
    "balanced": (
        [
            "I like knowing the main points and a line on why for each.",
            "Not after an essay, but a reason or two helps me trust advice.",
            "A middle ground suits me: the key ideas plus short reasons.",
        ],
        "Give me the main points with brief reasons.",
    ),
    "in_depth": (
        [
            "I want to understand why exactly, with the trade-offs.",
            "Give me the deep dive, I read everything to the end.",
            "The reasoning matters more to me than the answer.",
        ],
        "Go into the detail, caveats included.",
    ),
    "bulleted_list": (
        [
            "I keep notes as bullet lists on my phone.",
            "A list of key points I can tick off works best for me.",
            "Walls of text lose me, I scan for the key points.",
        ],
        "Lay answers out as bullets I can scan.",
    ),
    "step_by_step": (
        [
            "Walk me through it in order, I lose track otherwise.",
            "I do best with a checklist, first thing to last.",
            "One thing at a time, in sequence, please.",
        ],
        "Number the steps in the order I should do them.",
    ),
    "prose": (
        [
            "I'd rather read it like a letter than a list.",
            "Bullet points feel cold to me, I like a proper paragraph.",
            "I enjoy answers that read like a good magazine piece.",
        ],
        "Write in flowing paragraphs rather than lists.",
    ),
    "casual": (
        [
            "haha ok so I'm kinda winging this, gonna be honest.",
            "lol my mates think I've lost it.",
            "Honestly I'm just messing about with it, mate.",
        ],
        "Talk to me like a friend would.",
    ),
    "formal": (
        [
            "Kindly advise on the appropriate approach.",
            "I would appreciate a precise and professional manner of reply.",
            "I prefer correspondence to be formally worded. Regards.",
        ],
        "Keep the register formal and exact.",
    ),
    "warm_encouraging": (
        [
            "I get discouraged so easily and nearly quit last month.",
            "Bit nervous to even ask this, I feel behind everyone.",
            "I'm anxious I'm doing it all wrong.",
        ],
        "Be kind and reassuring with me.",
    ),
    "blunt": (
        [
            "No fluff please, just give it to me straight.",
            "Don't sugar-coat it, I can take it.",
            "Cut to the point, I hate pleasantries.",
        ],
        "Be frank and skip the cushioning.",
    ),
    "sustainability_minded": (
        [
            "I try to buy second-hand and cut waste wherever I can.",
            "Plastic-heavy options put me off, the environment matters.",
            "I care a lot about ethical, low-waste choices.",
        ],
        "Suggest the greener option when there is one.",
    ),
    "faith_informed": (
        [
            "I plan my week around church and prayer times.",
            "My faith shapes what I can and can't do on the sabbath.",
            "Fitting this around my prayers at the mosque matters to me.",
        ],
        "Keep advice compatible with my religious practice.",
    ),
    "evidence_only": (
        [
            "Show me the studies, I'm sceptical of folk wisdom.",
            "I only trust what the evidence and data support.",
            "Is there actual research behind this or just anecdotes?",
        ],
        "Back claims with evidence, not tradition or spirituality.",
    ),
    "tradition_minded": (
        [
            "My grandmother did it the old way and I want to honour that.",
            "Our heritage and customs matter a lot in my family.",
            "I'd like to keep to how the elders always did it.",
        ],
        "Respect the traditional way of doing things.",
    ),
    "tight_budget": (
        [
            "Money is really tight, so the cheap route is the only route.",
            "I can't afford much, I'm on a small pension.",
            "Is there a free or cheap way? I'm broke until payday.",
        ],
        "Keep suggestions free or very low-cost.",
    ),
    "flexible_budget": (
        [
            "Cost isn't an issue, I'd rather pay for quality.",
            "Happy to spend on good kit if it's worth it.",
            "Money is not the problem, time and results are.",
        ],
        "Recommend the best option regardless of price.",
    ),
    "time_poor": (
        [
            "Between shifts and the kids I get maybe ten minutes a day.",
            "I'm so busy I only have my lunch break for this.",
            "My commute is the only free time I've got.",
        ],
        "Fit everything into a few minutes a day.",
    ),
    "time_rich": (
        [
            "Retired now, so I have whole afternoons free.",
            "I've got loads of free time at the moment.",
            "Time is the one thing I have plenty of these days.",
        ],
        "There's no rush, longer projects are welcome.",
    ),
    "health_limits": (
        [
            "My back pain flares if I overdo it.",
            "Chronic fatigue means my energy runs out fast.",
            "Arthritis in my hands limits how long I can keep at it.",
        ],
        "Work around my physical limits and low energy.",
    ),
    "accessibility_needs": (
        [
            "I use a screen reader, so images and charts don't help me.",
            "I'm deaf, so anything audio-only is out for me.",
            "I'm in a wheelchair, so step-free options matter.",
        ],
        "Only suggest options that are accessible for my disability.",
    ),
    "first_time": (
        [
            "This will be my very first go at it.",
            "I've never tried this in my life.",
            "Complete first-timer here.",
        ],
        "Assume I'm trying this for the first time.",
    ),
    "tried_and_struggled": (
        [
            "I tried twice already and gave up both times.",
            "Last attempt fizzled out after a few weeks.",
            "I keep starting and failing, so something isn't working.",
        ],
        "Help me avoid what made me give up before.",
    ),
    "returning": (
        [
            "I did this years ago and want to pick it up again.",
            "Coming back after a long break, a lot has changed.",
            "Used to be decent at it before life got in the way.",
        ],
        "Treat me as someone rusty coming back to it.",
    ),
    "seasoned": (
        [
            "I've done this for decades now.",
            "Been at it for fifteen years, I know the routine.",
            "This has been my thing for as long as I can remember.",
        ],
        "Treat me as someone with long experience.",
    ),
    "enjoyment": (
        [
            "It's purely for fun, no pressure.",
            "I just want to enjoy it and relax.",
            "This is my way to unwind at the weekend.",
        ],
        "Keep it fun; I'm not trying to achieve anything.",
    ),
    "career": (
        [
            "I want this to help my career and my portfolio.",
            "Hoping this turns into paid work or a promotion.",
            "It's for my job, so it has to pay off professionally.",
        ],
        "Tie advice to my professional goals.",
    ),
    "social_connection": (
        [
            "Mostly I want to meet people, I've been lonely since the move.",
            "I'd love a club or group to do this together with friends.",
            "The community side is what draws me.",
        ],
        "Point me to ways to do this with other people.",
    ),
    "personal_growth": (
        [
            "I want to become more disciplined through this.",
            "It's about growing as a person, not the result.",
            "I see this as a way to learn something about myself.",
        ],
        "Frame advice around learning and self-improvement.",
    ),
    "quick_result": (
        [
            "I need something that works by this weekend.",
            "Results fast please, I don't have months.",
            "I just need a quick win right now.",
        ],
        "Get me to a concrete result as quickly as possible.",
    ),
}


def _category(text: str) -> str:
    found = [c for c in TOPICS if c in text]
    return found[0] if found else "Lifestyle_and_Personal_Development"


def persona_expand(t: dict[str, str], rng: random.Random) -> str:
    category = _category(t.get("category", ""))
    targets = TARGET.findall(t.get("targets", ""))
    topic, other = rng.sample(TOPICS[category], 2)
    asks = rng.sample(ASKS, len(targets) + 1)
    place = next((rng.choice(PLACES[lv]) for d, lv in targets if lv in PLACES), None)
    profile, preferences = [], []
    for (dimension, level), ask in zip(targets, asks, strict=False):
        if level in PLACES:
            cues = [c.format(p=place) for c in PLACE_CUES]
            statement = f"Suggest what actually exists where I live, in {REGIONS[level]}."
        else:  # an unknown level still gets a post, plainly flagged
            cues, statement = LEVELS.get(
                level, ([f"I have firm views about {dimension}."], f"I want {dimension}: {level}.")
            )
        cue = rng.choice(cues)
        profile.append({"category": category, "text": f"{cue} {ask.format(t=topic)}"})
        preferences.append({"dimension": dimension, "level": level, "statement": statement})
    profile.append({"category": category, "text": asks[-1].format(t=other)})
    while len(profile) < 5:  # too few targets: more posts, still about the topic
        profile.append({"category": category, "text": rng.choice(ASKS).format(t=other)})
    role = rng.choice(ROLES[category])
    where = f" in {place}" if place else ""
    return json.dumps(
        {
            "name": f"{role}{where} into {topic}",
            "summary": f"A {role}{where} asking about {topic} and {other}.",
            "profile": profile[:8],
            "preferences": preferences,
            "narrative": f"When I ask about {topic}, this is what helps me. "
            + " ".join(p["statement"] for p in preferences[:3]),
        },
        ensure_ascii=False,
    )
