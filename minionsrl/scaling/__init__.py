"""scaling"""
