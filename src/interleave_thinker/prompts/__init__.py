"""interleave-thinker's own prompt templates, as data: one ``<name>.txt`` per template, no code.

Origin: written for this project, in our own words, with the released templates' placeholders and
answer format, so that what a model writes when prompted with them is read by the same parsers. The
released templates are the authors' text and are never shipped here: the prompt store
(:mod:`interleave_thinker.core.prompt_store`) obtains them at run time and falls back to these files.

| file | used by | placeholders |
| --- | --- | --- |
| ``planner_narrative.txt`` | :class:`~interleave_thinker.agents.planner.Planner`, a request without images | ``{text_input}`` |
| ``planner_guidance.txt`` | the planner, a request with images (split on ``<image>``) | ``{text_input}`` |
| ``critic.txt`` | :class:`~interleave_thinker.agents.critic.Critic` | ``{original_instruction}``, ``{rewritten_prompt}`` |
| ``judge_context.txt``, ``judge_edit_rule.txt``, ``judge_edit_sc.txt`` | :class:`~interleave_thinker.agents.judge.Judge`, semantic consistency (joined by newlines) | ``<instruction>`` |
| ``judge_context.txt``, ``judge_pq.txt`` | the judge, perceptual quality | none |
| ``references/critic.txt`` | the critic, for an attempt with reference images (``loop.references``; not a released template: in a folder of its own, never in the built-in set) | ``{original_instruction}``, ``{rewritten_prompt}``, ``{reference_count}`` |
| ``datagen/lexicon.txt`` | `data prompts` (:mod:`interleave_thinker.datagen.prompts_teacher`): the teacher's lexicon and instruction templates for one sub-category | ``{domain}``, ``{domain_description}``, ``{subcategory}``, ``{subcategory_description}``, ``{lexicon_size}``, ``{template_count}`` |
| ``datagen/prompts.txt`` | `data prompts`: one batch of prompts for a sub-category | ``{domain}``, ``{subcategory}``, ``{subcategory_description}``, ``{batch}``, ``{terms}``, ``{templates}``, ``{count}`` |
| ``loop/rank_attempts.txt`` | :class:`~interleave_thinker.agents.ranking.Ranker` (``loop.select_best: critic``): rank a step's attempts | ``{count}``, ``{count_plus_one}``, ``{instruction}`` |
| ``loop/review_sequence.txt`` | :class:`~interleave_thinker.agents.sequence_review.SequenceReviewer` (``loop.repair_budget``): name the steps that break consistency | ``{count}``, ``{steps}`` |
| ``consistency/system.txt``, ``consistency/pair.txt`` | `eval score consistency` (:mod:`interleave_thinker.eval.benchmarks.consistency.protocol`): our own rubric for a pair of consecutive images, pinned by SHA-256 there | ``{request}``, ``{first_step}``, ``{first_prompt}``, ``{second_step}``, ``{second_prompt}`` (``pair.txt``) |

Being data, this package imports nothing and any layer may read it (``importlib.resources``).
"""
